/* gguf_dump.c — text listing of GGUF metadata and tensors (system.md:
 * `llm170 gguf-dump`). */
#include "gguf_dump.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../num/quant.h"

void gguf_dump_str(FILE *out, struct gguf_str s)
{
    fputc('"', out);
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20 || c == 0x7f)
                fprintf(out, "\\x%02x", c);
            else
                fputc(c, out); /* UTF-8 passes through */
        }
    }
    fputc('"', out);
}

/* Unquoted, escaped (keys and tensor names). */
static void dump_name(FILE *out, const char *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f || c == '\\')
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
}

/* Shortest %g text that reads back as the same float / double. */
static void dump_f32(FILE *out, float f)
{
    char b[48];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, (double)f);
        if (strtof(b, NULL) == f)
            break;
    }
    fputs(b, out);
}

static void dump_f64(FILE *out, double d)
{
    char b[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, d);
        if (strtod(b, NULL) == d)
            break;
    }
    fputs(b, out);
}

void gguf_dump_scalar(FILE *out, enum gguf_vtype t, const void *pv)
{
    const uint8_t *p = pv;
    union {
        uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
        uint64_t u64; int64_t i64; float f32; double f64;
    } v;
    size_t n = gguf_vtype_size(t);
    if (n)
        memcpy(&v, p, n);
    switch (t) {
    case GGUF_UINT8: fprintf(out, "%u", v.u8); break;
    case GGUF_INT8: fprintf(out, "%d", v.i8); break;
    case GGUF_UINT16: fprintf(out, "%u", v.u16); break;
    case GGUF_INT16: fprintf(out, "%d", v.i16); break;
    case GGUF_UINT32: fprintf(out, "%" PRIu32, v.u32); break;
    case GGUF_INT32: fprintf(out, "%" PRId32, v.i32); break;
    case GGUF_UINT64: fprintf(out, "%" PRIu64, v.u64); break;
    case GGUF_INT64: fprintf(out, "%" PRId64, v.i64); break;
    case GGUF_FLOAT32: dump_f32(out, v.f32); break;
    case GGUF_FLOAT64: dump_f64(out, v.f64); break;
    case GGUF_BOOL: fputs(v.u8 ? "true" : "false", out); break;
    case GGUF_STRING: {
        struct gguf_str s;
        memcpy(&s.len, p, 8);
        s.ptr = (const char *)p + 8;
        gguf_dump_str(out, s);
        break;
    }
    default: fputs("?", out); break;
    }
}

static void dump_kv(FILE *out, const struct gguf_kv *kv, int limit)
{
    dump_name(out, kv->key.ptr, kv->key.len);
    if (kv->type != GGUF_ARRAY) {
        fprintf(out, ": %s = ", gguf_vtype_name(kv->type));
        gguf_dump_scalar(out, kv->type, kv->val);
        fputc('\n', out);
        return;
    }
    fprintf(out, ": array[%s] = [", gguf_vtype_name(kv->arr_type));
    uint64_t shown = kv->arr_n;
    if (limit >= 0 && (uint64_t)limit < shown)
        shown = (uint64_t)limit;
    size_t es = gguf_vtype_size(kv->arr_type);
    for (uint64_t i = 0; i < shown; i++) {
        if (i)
            fputs(", ", out);
        if (kv->arr_type == GGUF_STRING)
            gguf_dump_str(out, gguf_arr_str(kv, i));
        else
            gguf_dump_scalar(out, kv->arr_type, kv->val + i * es);
    }
    if (shown < kv->arr_n)
        fprintf(out, "%s... (%" PRIu64 " total)", shown ? ", " : "", kv->arr_n);
    fputs("]\n", out);
}

int gguf_dump(FILE *out, const struct gguf *g, bool meta_only, int limit)
{
    fprintf(out, "GGUF version %u, n_kv %" PRIu64 ", n_tensors %" PRIu64 ", alignment %u, parts %d, data_start %" PRIu64
            "\n", g->version, g->n_kv, g->n_tensors, g->alignment, g->n_parts, g->n_parts ? g->parts[0].data_start : 0);
    for (uint64_t i = 0; i < g->n_kv; i++)
        dump_kv(out, &g->kv[i], limit);
    if (!meta_only)
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const struct gguf_tensor *t = &g->tensors[i];
            const struct qtype_info *q = qtype_get(t->type);
            dump_name(out, t->name, strlen(t->name));
            fprintf(out, "  %s  [", q ? q->name : "?");
            for (uint32_t j = 0; j < t->n_dims; j++)
                fprintf(out, "%s%" PRId64, j ? ", " : "", t->ne[j]);
            fprintf(out, "]  offset %" PRIu64, t->offset);
            if (g->n_parts > 1)
                fprintf(out, "  part %d", t->part + 1);
            fputc('\n', out);
        }
    if (fflush(out) != 0 || ferror(out))
        return ERR_IO;
    return 0;
}
