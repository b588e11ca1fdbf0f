// sdk_cases.mjs — the case runner the SDK end-to-end scripts share (tests/openai_sdk/e2e.mjs,
// tests/anthropic_sdk/e2e.mjs): one line per case, "ok - name", "not ok - name" (after a "#" line
// with the error's first frames) or "skip - name: why" when the case returns "skip:why".

let failed = 0;

// Runs one case; prefix (may be "") goes in front of its name with an underscore.
export async function tcase(prefix, name, fn) {
  name = prefix ? `${prefix}_${name}` : name;
  try {
    const r = await fn();
    if (typeof r === 'string' && r.startsWith('skip:')) console.log(`skip - ${name}: ${r.slice(5)}`);
    else console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`# ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
    console.log(`not ok - ${name}`);
  }
}

export function assert(c, msg) { if (!c) throw new Error(msg); }

// Ends the process: status 1 when a case failed.
export function finish() { process.exit(failed ? 1 : 0); }
