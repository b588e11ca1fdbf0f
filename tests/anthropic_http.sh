#!/bin/bash
# anthropic_http.sh — the Anthropic Messages API end to end: `llm170 serve` on
# stories260K.gguf (daemon + worker + gateway) answers POST /v1/messages
# (non-streamed and streamed, greedy: the stream's text equals the whole
# reply's), a stop sequence (stop_reason stop_sequence naming it: the worker's
# stop_hit through the daemon), POST /v1/messages/count_tokens (the same
# count as the reply's usage.input_tokens), x-api-key, and Anthropic error
# objects for a missing max_tokens and a wrong key. SKIPs while a piece is missing.
set -u
cd "$(dirname "$0")/.."
BIN=${LLM170_BIN:-$PWD/bin}
SHARED=${LLM170_SHARED:-../shared/data}
MODEL=$SHARED/models/stories260K.gguf
skip() { echo "skip - anthropic_http: $1"; exit 0; }

[ -f "$MODEL" ] || skip "$MODEL not present"
for p in llm170 llm170d llm170-worker llm170-gateway; do
    [ -x "$BIN/$p" ] || skip "$BIN/$p is not built yet"
done
command -v curl >/dev/null || skip "curl is not installed"
command -v python3 >/dev/null || skip "python3 is not installed"

RUN=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
KEY=sk-llm170-anth-$$
export XDG_RUNTIME_DIR=$RUN LLM170_SOCKET=ipc://$RUN/llm170d.sock   # a private daemon socket
"$BIN/llm170" serve --model "$MODEL" --host 127.0.0.1 --port "$PORT" --slots 2 --api-key "$KEY" \
    >"$RUN/serve.log" 2>&1 &
pid=$!
cleanup() {
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$RUN"
}
trap cleanup EXIT

up=0
for _ in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || break
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && { up=1; break; }
    sleep 0.1
done
if [ "$up" != 1 ]; then
    echo "not ok - anthropic_serve_started"
    tail -20 "$RUN/serve.log" | sed 's/^/#   /'
    exit 1
fi
echo "ok - anthropic_serve_started"

rc=0
# post PATH BODY [KEY] → $RUN/body, prints the status
post() {
    curl -s -o "$RUN/body" -w '%{http_code}' -H "x-api-key: ${3-$KEY}" -H 'anthropic-version: 2023-06-01' \
        -H 'content-type: application/json' --data-binary "$2" "http://127.0.0.1:$PORT$1"
}
# check NAME PYTHON: runs the Python check on $RUN/body (as `b`, the text) and the extra files; prints ok/not ok
check() {
    local name=$1 code=$2 out
    if out=$(RUN=$RUN python3 -c "
import json, os, sys
R = os.environ['RUN']
b = open(R + '/body').read()
def j(): return json.loads(b)
def events(text):
    ev = []
    for part in text.split('\n\n'):
        if not part.strip(): continue
        lines = part.split('\n')
        assert lines[0].startswith('event: ') and lines[1].startswith('data: '), 'not an event: %r' % part
        ev.append((lines[0][7:], json.loads(lines[1][6:])))
    return ev
$code
" 2>&1); then
        echo "ok - $name"
    else
        echo "not ok - $name"
        echo "$out" | tail -5 | sed 's/^/#   /'
        echo "#   body: $(head -c 600 "$RUN/body")"
        rc=1
    fi
}

MSGS='"messages":[{"role":"user","content":[{"type":"text","text":"Once upon a time"}]}]'
st=$(post /v1/messages "{\"model\":\"x\",\"max_tokens\":16,\"temperature\":0,\"system\":\"Tell a story.\",$MSGS}")
check anthropic_unknown_model "
assert '$st' == '404', 'status $st'
e = j()
assert e['type'] == 'error' and e['error']['type'] == 'not_found_error', e"
st=$(post /v1/messages "{\"max_tokens\":16,\"temperature\":0,\"system\":\"Tell a story.\",$MSGS,\"metadata\":{\"user_id\":\"u\"}}")
cp "$RUN/body" "$RUN/whole"
check anthropic_message "
assert '$st' == '200', 'status $st'
m = j()
assert m['type'] == 'message' and m['role'] == 'assistant' and m['id'].startswith('msg_'), m
assert len(m['content']) == 1 and m['content'][0]['type'] == 'text' and m['content'][0]['text'], m
assert m['stop_reason'] in ('max_tokens', 'end_turn'), m
u = m['usage']
assert u['input_tokens'] > 0 and 0 < u['output_tokens'] <= 16, u
assert (m['stop_reason'] == 'max_tokens') == (u['output_tokens'] == 16), m
assert m['stop_sequence'] is None"

st=$(post /v1/messages "{\"max_tokens\":16,\"temperature\":0,\"stream\":true,\"system\":\"Tell a story.\",$MSGS}")
check anthropic_stream "
assert '$st' == '200', 'status $st'
ev = events(b)
names = [n for n, d in ev if n != 'ping']
for n, d in ev: assert d['type'] == n, (n, d)
assert names[0] == 'message_start' and names[-2:] == ['message_delta', 'message_stop'], names
assert names[1] == 'content_block_start' and names[-3] == 'content_block_stop', names
assert set(names[2:-3]) == {'content_block_delta'}, names
text = ''.join(d['delta']['text'] for n, d in ev if n == 'content_block_delta')
whole = json.load(open(R + '/whole'))
assert text == whole['content'][0]['text'], (text, whole)
md = ev[-2][1]
assert md['delta']['stop_reason'] == whole['stop_reason'], md
assert md['usage']['output_tokens'] == whole['usage']['output_tokens'], md
assert md['usage']['input_tokens'] == whole['usage']['input_tokens'], md"

st=$(post /v1/messages/count_tokens "{\"model\":\"\",\"system\":\"Tell a story.\",$MSGS}")
check anthropic_count_tokens "
assert '$st' == '200', 'status $st'
whole = json.load(open(R + '/whole'))
assert j() == {'input_tokens': whole['usage']['input_tokens']}, (j(), whole['usage'])"

# a stop sequence from the middle of the greedy reply: the text ends right before it and the reply names it
STOP=$(python3 -c "
import json
t = json.load(open('$RUN/whole'))['content'][0]['text']
k = len(t) // 2
s = t[k:k + 3]
print(json.dumps(s))")
st=$(post /v1/messages "{\"max_tokens\":16,\"temperature\":0,\"stop_sequences\":[\"@@never@@\",$STOP],\"system\":\"Tell a story.\",$MSGS}")
check anthropic_stop_sequence "
assert '$st' == '200', 'status $st'
m = j()
stop = $STOP
t = json.load(open(R + '/whole'))['content'][0]['text']
assert m['stop_reason'] == 'stop_sequence' and m['stop_sequence'] == stop, m
got = ''.join(c['text'] for c in m['content'])
assert got == t[:t.find(stop)], (got, t, stop)"

st=$(post /v1/messages "{$MSGS}")
check anthropic_missing_max_tokens "
assert '$st' == '400', 'status $st'
e = j()
assert e['type'] == 'error' and e['error']['type'] == 'invalid_request_error' and 'max_tokens' in e['error']['message'], e"

st=$(post /v1/messages "{\"max_tokens\":4,$MSGS}" wrong-key)
check anthropic_bad_api_key "
assert '$st' == '401', 'status $st'
e = j()
assert e['type'] == 'error' and e['error']['type'] == 'authentication_error', e"

exit $rc
