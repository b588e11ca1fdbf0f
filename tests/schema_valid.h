/* schema_valid.h — an independent JSON Schema validator for the tests of
 * constrained decoding (test_structured, test_toolgram): written from the
 * JSON Schema rules with jansson and POSIX regex, sharing nothing with the
 * grammar code it checks. valid(v, schema, root, why, cap): whether v
 * satisfies schema ($refs resolve in root); why says what failed. */
#ifndef LLM170_TESTS_SCHEMA_VALID_H
#define LLM170_TESTS_SCHEMA_VALID_H

#include <jansson.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool re_full(const char *re, const char *s)
{
    regex_t r;
    if (regcomp(&r, re, REG_EXTENDED | REG_NOSUB))
        return false;
    bool ok = regexec(&r, s, 0, NULL, 0) == 0;
    regfree(&r);
    return ok;
}

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static bool format_ok(const char *f, const char *s)
{
    int y, mo, d, h, mi, se;
    if (!strcmp(f, "date"))
        return re_full("^[0-9]{4}-[0-9]{2}-[0-9]{2}$", s) && sscanf(s, "%d-%d-%d", &y, &mo, &d) == 3 && mo >= 1 &&
               mo <= 12 && d >= 1 && d <= 31;
    static const char *const time_re = "[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$";
    char re[256];
    if (!strcmp(f, "time")) {
        snprintf(re, sizeof re, "^%s", time_re);
        return re_full(re, s) && sscanf(s, "%d:%d:%d", &h, &mi, &se) == 3 && h <= 23 && mi <= 59 && se <= 59;
    }
    if (!strcmp(f, "date-time")) {
        snprintf(re, sizeof re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T%s", time_re);
        return re_full(re, s) && sscanf(s, "%d-%d-%dT%d:%d:%d", &y, &mo, &d, &h, &mi, &se) == 6 && mo >= 1 &&
               mo <= 12 && d >= 1 && d <= 31 && h <= 23 && mi <= 59 && se <= 59;
    }
    if (!strcmp(f, "uuid"))
        return re_full("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", s);
    return false;
}

static bool type_ok(const char *t, const json_t *v)
{
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

static bool valid(const json_t *v, const json_t *s, const json_t *root, char *why, size_t cap)
{
#define NO(...) do { snprintf(why, cap, __VA_ARGS__); return false; } while (0)
    const json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        const char *ref = json_string_value(x);
        const json_t *t = !strncmp(ref, "#/$defs/", 8) ? json_object_get(json_object_get(root, "$defs"), ref + 8) : NULL;
        if (!t)
            NO("unresolved $ref");
        return valid(v, t, root, why, cap);
    }
    if ((x = json_object_get(s, "const")) && !json_equal((json_t *)x, (json_t *)v))
        NO("const");
    if ((x = json_object_get(s, "enum"))) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(x); i++)
            any |= json_equal(json_array_get(x, i), (json_t *)v);
        if (!any)
            NO("enum");
    }
    if ((x = json_object_get(s, "anyOf"))) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(x); i++)
            any |= valid(v, json_array_get(x, i), root, why, cap);
        if (!any)
            NO("anyOf");
    }
    if ((x = json_object_get(s, "oneOf"))) {
        int n = 0;
        for (size_t i = 0; i < json_array_size(x); i++)
            n += valid(v, json_array_get(x, i), root, why, cap);
        if (n != 1)
            NO("oneOf: %d branches match", n);
    }
    if ((x = json_object_get(s, "type"))) {
        bool ok = false;
        if (json_is_string(x))
            ok = type_ok(json_string_value(x), v);
        for (size_t i = 0; json_is_array(x) && i < json_array_size(x); i++)
            ok |= type_ok(json_string_value(json_array_get(x, i)), v);
        if (!ok)
            NO("type");
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_object_get(v, json_string_value(json_array_get(req, i))))
                NO("required '%s'", json_string_value(json_array_get(req, i)));
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)v, k, val) {
            const json_t *ps = json_object_get(props, k);
            if (ps) {
                if (!valid(val, ps, root, why, cap))
                    return false;
            } else if (json_is_false(json_object_get(s, "additionalProperties"))) {
                NO("additional property '%s'", k);
            }
        }
    }
    if (json_is_array(v)) {
        const json_t *items = json_object_get(s, "items");
        size_t n = json_array_size(v);
        if ((x = json_object_get(s, "minItems")) && n < (size_t)json_integer_value(x))
            NO("minItems");
        if ((x = json_object_get(s, "maxItems")) && n > (size_t)json_integer_value(x))
            NO("maxItems");
        for (size_t i = 0; items && i < n; i++)
            if (!valid(json_array_get(v, i), items, root, why, cap))
                return false;
    }
    if (json_is_string(v)) {
        const char *str = json_string_value(v);
        size_t n = utf8_chars(str);
        if ((x = json_object_get(s, "minLength")) && n < (size_t)json_integer_value(x))
            NO("minLength");
        if ((x = json_object_get(s, "maxLength")) && n > (size_t)json_integer_value(x))
            NO("maxLength");
        if ((x = json_object_get(s, "pattern")) && !re_full(json_string_value(x), str))
            NO("pattern");
        if ((x = json_object_get(s, "format")) && !format_ok(json_string_value(x), str))
            NO("format %s", json_string_value(x));
    }
    return true;
#undef NO
}

#endif
