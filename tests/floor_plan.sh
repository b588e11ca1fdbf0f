#!/bin/bash
# floor_plan.sh — the worker's layers stay layered: the include graph and the
# call graph of the built objects point only down the floor plan below, have
# no cycles, a backend's internals stay inside its folder, every external
# symbol carries its file's prefix, and no generated file is committed.
#
# The floor plan, top to bottom (docs/architecture.md): programs
# (worker/worker_main.c, client/, daemon/, gateway/) → worker/serve/ (beside
# it worker/chat/) → worker/engine/ → the backends (worker/cpu/, worker/hip/)
# → worker/backend/ (the seam: ops table + types) → worker/model/ →
# worker/tok/ → worker/gguf/ → worker/num/ → common/; proto/ serves the
# programs only. The table LAYERS is the rule, folder by folder ("prog" is a
# program's own files); a folder may always use itself. The backends' rows
# come from the table of backends (a folder whose header it includes); any
# other folder missing from the table is a failure until it is placed.
#
# Decisions taken against the code as it is (each one a dependency that is
# legitimate, not a convenience):
#  - model → tok: a model owns its vocabulary (model.h embeds the tokenizer
#    that model_load builds from the same GGUF), so tok sits below model.
#  - tok → gguf: the tokenizer is read from the GGUF's metadata arrays.
#  - gguf → num, never num → gguf: the GGUF reader checks tensor sizes with the
#    ggml type table (num/quant.h, qtype.c); the numbers know nothing of files.
#  - num sits below tok (tok → num is allowed and unused today): both are
#    leaves over gguf/common, and only this order keeps gguf → num legal.
#  - chat beside serve: it renders a model's template (chat → model, tok,
#    gguf) and serve or a program calls it; engine and the backends never do.
#  - hip → kernels/: kernels/*.h are the host/device argument ABI of the hip
#    backend's kernels (kernels/*.cu), embedded as $BUILD/gen/hip_kernels_gen.c;
#    that object counts as part of worker/hip/ here; likewise shaders/ compiled
#    into $BUILD/gen/vk_shaders_gen.c, part of worker/vulkan/.
#  - programs → proto: the programs' IPC; the worker's layers never use it.
#  - common/version.c includes "version_gen.h" from $BUILD/gen (-I there,
#    Makefile): the one include that does not resolve in the tree.
#  - Only worker/engine/engine_backends.c (the table of backends) may include a
#    backend's header, and its object may refer only to the backend's ops
#    table, a `*_backend` symbol (cpu_backend, hip_backend, vk_backend …).
# Today's known violations sit in KNOWN_* allow-lists below, each with the
# reason; an entry that no longer matches anything fails the case, so the
# lists only shrink.
set -u
export LC_ALL=C
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${LLM170_BUILD:-$ROOT/build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
cd "$ROOT" || exit 1
T=$(mktemp -d /tmp/llm170-floor.XXXXXX)
trap 'rm -rf "$T"' EXIT
report() { # name, reasons (one per line; empty = pass)
    if [ -z "$2" ]; then echo "ok - $1"; else printf '%s\n' "$2" | sed 's/^/#   /'; echo "not ok - $1"; fi
}

# folder: the folders it may use (besides itself)
LAYERS='
prog    serve engine backend model chat tok gguf num common proto
serve   engine backend model chat tok gguf num common
chat    model tok gguf common
engine  backend model tok gguf common
backend model num gguf tok common
model   num gguf tok common
tok     gguf num common
gguf    num common
num     common
common
proto   common
'
BACKEND_TABLE=worker/engine/engine_backends
# The backends are the folders whose header the table of backends includes, so a new backend needs no
# edit here: each one may use what the seam may, plus its device code (kernels/ for hip, shaders/ for
# a Vulkan backend).
BACKENDS=$(grep -o '^#include "\.\./[a-z0-9_]*/' "$ROOT/$BACKEND_TABLE.c" | sed 's|.*\.\./||; s|/$||' |
    grep -vxE 'backend|model|engine' | sort -u | tr '\n' ' ')
for b in $BACKENDS; do LAYERS="$LAYERS$b backend model num gguf tok common kernels shaders
"; done
BUILD_INCLUDES="common/version.c:version_gen.h"

# ---- Today's known violations, for the integrator to fix and then delete
# here. Shrink, never grow: an entry that no longer matches anything fails
# its case ("remove it").
# include_layers, "from -> to  # reason":
KNOWN_INCLUDES='
'
# no_call_cycles: call edges that close a cycle between two files of one
# folder, "from -> to  # reason"; the case drops them before tsort and an
# entry is stale once the graph has no cycle through it
KNOWN_CALL_CYCLES='
'
# file_prefix: permanent exceptions, "object symbol  # reason" ...
PREFIX_EXCEPTIONS='
worker/worker_main main  # the program entry point
'
# ... and today's offenders, "object symbol-or-prefix*  # reason", each a
# family to rename (or a file to rename after its family)
KNOWN_PREFIX='
worker/num/quant dequant_row  # quant_dequant_row
worker/num/quant vec_dot*  # quant_vec_dot*
worker/num/quantize quant_weights_row  # quantize_weights_row
worker/serve/sampling smp_*  # rename the file serve/smp.c, or the family sampling_*
'

# The awk helpers every case shares: a path's layer and the table's verdict.
AWK_LIB='
function layer(p,   a) {
    if (p ~ /^worker\/[^\/]+\//) { split(p, a, "/"); return a[2] }
    if (p ~ /^worker\/[^\/]+$/ || p ~ /^(client|daemon|gateway)\//) return "prog"
    if (p ~ /^gen\/hip_/) return "hip"
    if (p ~ /^gen\/vk_/) return "vulkan"
    split(p, a, "/"); return a[1]
}
function load_table(s,   lines, n, i, f) {
    n = split(s, lines, "\n")
    for (i = 1; i <= n; i++) { if (split(lines[i], f, " ") >= 1) { allow[f[1]] = " " substr(lines[i], index(lines[i], f[1]) + length(f[1])) " "; gsub(/[ \t]+/, " ", allow[f[1]]) } }
    nb = split(backends, bk, " "); for (i = 1; i <= nb; i++) isbk[bk[i]] = 1
}
# why the edge from (file) to (file) is refused, or "" when the table allows it
function refused(from, to,   lf, lt) {
    lf = layer(from); lt = layer(to)
    if (lf == lt) return ""
    if (!(lf in allow)) return "folder " lf " is not in the table"
    if (index(allow[lf], " " lt " ")) return ""
    if (lt in isbk && from ~ ("^" table "([.]c)?$")) return ""
    return lf " may not use " lt
}
'

# ---------------------------------------------------------------- includes
find . \( -name .git -o -path ./build -o -path './build-*' -o -path ./bin \) -prune -o -type f -print |
    sed 's#^\./##' >"$T/files"
grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' --include='*.c' --include='*.h' \
    worker client daemon gateway common proto >"$T/includes" 2>/dev/null
awk -v tabs="$LAYERS" -v backends="$BACKENDS" -v table="$BACKEND_TABLE" -v known="$KNOWN_INCLUDES" \
    -v buildinc="$BUILD_INCLUDES" -v edges="$T/inc_edges" -v used="$T/inc_known_used" "$AWK_LIB"'
function norm(p,   parts, n, i, m, out, r) {
    n = split(p, parts, "/"); m = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "" || parts[i] == ".") continue
        if (parts[i] == "..") { if (m == 0) return ""; m--; continue }
        out[++m] = parts[i]
    }
    r = out[1]; for (i = 2; i <= m; i++) r = r "/" out[i]
    return r
}
BEGIN {
    load_table(tabs)
    n = split(known, kl, "\n")
    for (i = 1; i <= n; i++) { s = kl[i]; sub(/#.*/, "", s); if (split(s, f, " ") == 3) knownok[f[1] " -> " f[3]] = 1 }
    n = split(buildinc, f, " "); for (i = 1; i <= n; i++) bi[f[i]] = 1
}
FNR == NR { exists[$0] = 1; next }
{
    file = $0; sub(/:.*/, "", file)
    inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
    dir = file; sub(/\/[^\/]*$/, "", dir)
    to = norm(dir "/" inc)
    if (to == "" || !(to in exists)) {
        if ((file ":" inc) in bi) next
        print file " → \"" inc "\": does not resolve to a file in the tree"; next
    }
    print file, to >edges
    why = refused(file, to)
    if (why == "") next
    if ((file " -> " to) in knownok) { print file " -> " to >used; next }
    print file " → " to " (" why ")"
}' "$T/files" "$T/includes" >"$T/inc_bad"
: >>"$T/inc_edges"; : >>"$T/inc_known_used"
# allow-list entries that matched nothing are stale
printf '%s\n' "$KNOWN_INCLUDES" | sed 's/#.*//' | awk 'NF == 3 { print $1 " -> " $3 }' | sort -u >"$T/inc_known"
sort -u "$T/inc_known_used" | comm -23 "$T/inc_known" - | sed 's/$/: KNOWN_INCLUDES entry matches nothing any more: remove it/' >>"$T/inc_bad"
grep -q '^worker/' "$T/includes" || echo "no #include found under worker/: not the llm170 tree?" >>"$T/inc_bad"
report include_layers "$(cat "$T/inc_bad")"

# tsort reports each loop it breaks as "tsort: -: input contains a loop:" and its members
loops() { # edges file → one line per loop, "a → b → … → a"
    tsort "$1" 2>&1 >/dev/null | awk '
        /input contains a loop/ { if (n) print s " → " first; n = 0; next }
        { sub(/^tsort: /, ""); if (n++ == 0) { first = $0; s = $0 } else s = s " → " $0 }
        END { if (n) print s " → " first }'
}
grep '^worker/' "$T/inc_edges" | awk '$2 ~ /^worker\//' >"$T/inc_wedges"
report no_include_cycles "$(loops "$T/inc_wedges")"

# ---------------------------------------------------------------- objects
# only objects of sources in this tree (a moved or deleted source leaves its old object behind in a build
# folder that make never cleans) and the generated sources of gen/
mapfile -t OBJS < <(cd "$BUILD" 2>/dev/null && find worker common proto gen client daemon gateway -name '*.o' 2>/dev/null |
    sort | while read -r o; do case $o in gen/*) echo "$o" ;; *) [ -f "$ROOT/${o%.o}.c" ] && echo "$o" ;; esac; done)
nworker=0
for o in "${OBJS[@]}"; do case $o in worker/*) nworker=$((nworker + 1)) ;; esac; done
why=""
[ "$nworker" -eq 0 ] && why="no objects under $BUILD/worker (run make all first)"
command -v nm >/dev/null || why="nm absent (apt-get install binutils)"
if [ -z "$why" ] && ! (cd "$BUILD" && nm -A "${OBJS[@]}") >"$T/nm" 2>"$T/nm_err"; then
    for c in no_call_cycles backend_symbols_private file_prefix; do
        report $c "nm failed: $(head -3 "$T/nm_err")"
    done
elif [ -n "$why" ]; then
    for c in no_call_cycles backend_symbols_private file_prefix; do echo "skip - $c: $why"; done
else
    # "object type symbol" for every global symbol (defined: upper case but U; referenced: U, w)
    awk <"$T/nm" '
        { i = index($0, ":"); obj = substr($0, 1, i - 1); sub(/\.o$/, "", obj)
          n = split(substr($0, i + 1), f, " "); t = f[n - 1]; s = f[n]
          if (s ~ /^__/) next  # the compiler'"'"'s own (AddressSanitizer'"'"'s __odr_asan.*, …)
          if (t == "U" || t == "w") print obj, "U", s; else if (t ~ /^[A-Z]$/) print obj, "D", s }' >"$T/syms"

    # --- call graph: A refers to a symbol the library object B defines → A → B
    awk -v tabs="$LAYERS" -v backends="$BACKENDS" -v table="$BACKEND_TABLE" -v edges="$T/call_edges" "$AWK_LIB"'
    BEGIN { load_table(tabs) }
    $2 == "D" && $1 ~ /^(worker|common|proto|gen)\// { def[$3] = $1; next }
    $2 == "U" && $1 ~ /^worker\// { ref[++nr] = $1 " " $3 }
    END {
        for (i = 1; i <= nr; i++) {
            split(ref[i], f, " "); a = f[1]; s = f[2]
            if (!(s in def) || def[s] == a) continue
            b = def[s]
            if (b ~ /^(worker|gen)\// && !((a, b) in seen)) { seen[a, b] = 1; print a, b >edges }
            why = refused(a, b)
            if (why == "" && a == table && layer(b) in isbk && s !~ /_backend$/) why = "the table of backends refers to a backend only by its ops table (a *_backend symbol)"
            if (why != "") bad[a " → " b " (" why ")"] = bad[a " → " b " (" why ")"] " " s
        }
        for (k in bad) print k ":" bad[k]
    }' "$T/syms" | sort >"$T/call_bad"
    : >>"$T/call_edges"
    # the allow-listed back edges leave the graph; each must still close a cycle
    printf '%s\n' "$KNOWN_CALL_CYCLES" | sed 's/#.*//' | awk 'NF == 3 { print $1, $3 }' | sort -u >"$T/cyc_known"
    sort -u "$T/call_edges" | comm -23 - "$T/cyc_known" >"$T/call_graph"
    while read -r a b; do
        if ! grep -qxF "$a $b" "$T/call_edges"; then
            echo "KNOWN_CALL_CYCLES entry $a -> $b: no such call any more: remove it"
        elif { cat "$T/call_graph"; echo "$a $b"; } | tsort >/dev/null 2>&1; then
            echo "KNOWN_CALL_CYCLES entry $a -> $b closes no cycle any more: remove it"
        fi
    done <"$T/cyc_known" >>"$T/call_bad"
    why=$(loops "$T/call_graph" | sed 's/^/call cycle: /'; cat "$T/call_bad")
    report no_call_cycles "$why"

    # --- a backend's symbols are its own; the table of backends names only its *_backend ops table
    awk -v tabs="$LAYERS" -v backends="$BACKENDS" -v table="$BACKEND_TABLE" "$AWK_LIB"'
    BEGIN { load_table(tabs) }
    $2 == "D" && $1 ~ /^(worker|gen)\// && layer($1) in isbk { def[$3] = $1; next }
    $2 == "U" && $1 ~ /^(worker|client|daemon|gateway)\// { ref[++nr] = $1 " " $3 }
    END {
        for (i = 1; i <= nr; i++) {
            split(ref[i], f, " "); a = f[1]; s = f[2]
            if (!(s in def)) continue
            b = layer(def[s])
            if (layer(a) == b) continue
            if (a == table && s ~ /_backend$/) continue
            print a ".o refers to " s " (" def[s] ".o, inside worker/" b "/)"
        }
    }' "$T/syms" | sort -u >"$T/priv_bad"
    report backend_symbols_private "$(cat "$T/priv_bad")"

    # --- every external symbol of a worker/ object starts with its file's prefix:
    #     the base name (exactly, or followed by _) or its first word followed by _
    awk -v exc="$PREFIX_EXCEPTIONS" -v known="$KNOWN_PREFIX" -v used="$T/pre_known_used" '
    function list(s, arr,   n, i, l, f) { # "object pattern" lines; pattern "x*" = starts with x
        n = split(s, l, "\n")
        for (i = 1; i <= n; i++) { sub(/#.*/, "", l[i]); if (split(l[i], f, " ") == 2) arr[f[1] " " f[2]] = 1 }
    }
    function match_in(arr, obj, s,   k, f, p) {
        for (k in arr) {
            split(k, f, " "); if (f[1] != obj) continue
            p = f[2]
            if (p == s || (p ~ /\*$/ && index(s, substr(p, 1, length(p) - 1)) == 1)) return k
        }
        return ""
    }
    BEGIN { list(exc, ex); list(known, kn) }
    $2 == "D" && $1 ~ /^worker\// {
        base = $1; sub(/.*\//, "", base); word = base; sub(/_.*/, "", word)
        s = $3
        if (s == base || index(s, base "_") == 1 || index(s, word "_") == 1) next
        if (match_in(ex, $1, s) != "") next
        k = match_in(kn, $1, s)
        if (k != "") { print k >used; next }
        print $1 ".o defines " s " (want " base "_* or " word "_*)"
    }' "$T/syms" | sort >"$T/pre_bad"
    : >>"$T/pre_known_used"
    printf '%s\n' "$KNOWN_PREFIX" | sed 's/#.*//' | awk 'NF == 2 { print $1, $2 }' | sort -u >"$T/pre_known"
    sort -u "$T/pre_known_used" | comm -23 "$T/pre_known" - | sed 's/$/: KNOWN_PREFIX entry matches nothing any more: remove it/' >>"$T/pre_bad"
    report file_prefix "$(cat "$T/pre_bad")"
fi

# ---------------------------------------------------------------- git
# tests/golden/ is exempt: llama.cpp's answers (tests/oracle/make_goldens.sh
# and tests/scripts/), committed on purpose since the oracle cannot run in
# the suite; they are expected values, not build outputs.
if ! git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "skip - no_generated_in_git: $ROOT is not a git checkout"
else
    # regular files only (a submodule is listed as its directory); an unreadable file fails the case
    gen=$(cd "$ROOT" && git ls-files -z | grep -zv '^tests/golden/' |
        while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
        xargs -0 -r awk '
            FNR > 5 { nextfile }
            /(^|[^A-Za-z_])GENERATED([^A-Za-z_]|$)|@generated|[Dd][Oo] [Nn][Oo][Tt] [Ee][Dd][Ii][Tt]|[Aa][Uu][Tt][Oo]([Mm][Aa][Tt][Ii][Cc][Aa][Ll][Ll][Yy])?[- ]?[Gg][Ee][Nn][Ee][Rr][Aa][Tt][Ee][Dd]/ {
                l = $0; if (length(l) > 100) l = substr(l, 1, 100) "…"
                print FILENAME ":" FNR ": " l; nextfile }' 2>&1 || echo "reading the committed files failed")
    report no_generated_in_git "$gen"
fi
