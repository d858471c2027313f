#!/usr/bin/env node
// Resumption interop: the official TypeScript MCP SDK (npm `@modelcontextprotocol/sdk`) as a
// stock client of `forkscope serve`, reached through `forkscope proxy`, which cuts the
// connection mid-stream. The same two cases as interop/python/resume_client.py.
//
// Usage:
//   node resume_client.mjs URL --case tool|stream --policy fenced|naive \
//       --proxy-ctl FIFO --proxy-out FILE [--steps 25 --delay-ms 40 --drop-at 10] [--settle 5]
//
// Case `tool`: callTool(progress_task) with onprogress; at progress `--drop-at` the proxy
// NAT-drops every connection. The SDK's own reconnection (after the priming event, a POST stream
// is resumable: a GET with Last-Event-ID after the server's `retry:`) must deliver
//   fenced: progress 1..steps exactly once, in order, and the result;
//   naive:  nothing more: the resume lands on a fresh standalone stream, the result is lost
//           (the request times out after a bounded wait) — damage, expected.
// Case `stream`: the standalone GET stream with background emits, collected through a
// notifications/message handler; after 5, drop; after the SDK reconnected, collect until the
// counter passes the pre-drop maximum by `--settle`.
//   fenced: background numbers strictly consecutive; naive: numbers repeat (damage, expected).
//
// Only public API: Client, StreamableHTTPClientTransport (its `fetch` option records the
// requests on the wire), setNotificationHandler, callTool({ onprogress, timeout }).
// Prints `PASS name (detail)` / `FAIL name: detail` per check and `note:` lines; exit 0 iff all
// checks passed.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { readFileSync, openSync, writeSync, closeSync, constants } from 'node:fs';
import { parseArgs } from 'node:util';

const CASE_TIMEOUT_MS = 40_000;
const ACK_TIMEOUT_MS = 5_000;
const TOOL_NAME = 'progress_task';

const { values: opt, positionals } = parseArgs({
    allowPositionals: true,
    options: {
        case: { type: 'string' },
        policy: { type: 'string' },
        'proxy-ctl': { type: 'string' },
        'proxy-out': { type: 'string' },
        steps: { type: 'string', default: '25' },
        'delay-ms': { type: 'string', default: '40' },
        'drop-at': { type: 'string', default: '10' },
        'lost-after': { type: 'string', default: '5' },
        before: { type: 'string', default: '5' },
        settle: { type: 'string', default: '5' },
        wait: { type: 'string', default: '12' }
    }
});
const url = positionals[0];
if (!url || !['tool', 'stream'].includes(opt.case) || !['fenced', 'naive'].includes(opt.policy) || !opt['proxy-ctl'] || !opt['proxy-out']) {
    console.error('usage: resume_client.mjs URL --case tool|stream --policy fenced|naive --proxy-ctl FIFO --proxy-out FILE');
    process.exit(2);
}
const naive = opt.policy === 'naive';
const steps = Number(opt.steps);
const delayMs = Number(opt['delay-ms']);
const dropAt = Number(opt['drop-at']);

let passed = 0;
let failed = 0;
function check(name, ok, detail = '') {
    if (ok) {
        passed++;
        console.log(`PASS ${name}${detail ? ` (${detail})` : ''}`);
    } else {
        failed++;
        console.log(`FAIL ${name}${detail ? `: ${detail}` : ''}`);
    }
    return ok;
}
const note = text => console.log(`note: ${text}`);
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const short = (s, keep = 24) => (s == null ? '-' : s.length <= keep ? s : `${s.slice(0, keep - 1)}…`);

/** 1,2,3,4,7,7,8 -> '1-4,7,7-8' */
function compact(values) {
    const out = [];
    for (let i = 0; i < values.length; ) {
        let j = i;
        while (j + 1 < values.length && values[j + 1] === values[j] + 1) j++;
        out.push(i === j ? `${values[i]}` : `${values[i]}-${values[j]}`);
        i = j + 1;
    }
    return out.length ? out.join(',') : '(none)';
}

function analyse(numbers) {
    const seen = new Set();
    const dups = [];
    const gaps = [];
    numbers.forEach((n, i) => {
        if (seen.has(n)) dups.push(n);
        seen.add(n);
        if (i && n > numbers[i - 1] + 1) gaps.push([numbers[i - 1], n]);
    });
    return { dups, gaps };
}

// ---- the wire, as the SDK's `fetch` option sees it --------------------------------------------
const t0 = performance.now();
const now = () => performance.now() - t0;
const exchanges = [];
async function recordingFetch(input, init) {
    const headers = new Headers(init?.headers);
    const method = init?.method ?? 'GET';
    const response = await fetch(input, init);
    exchanges.push({
        t: now(),
        method,
        lastEventId: headers.get('last-event-id'),
        status: response.status,
        contentType: (response.headers.get('content-type') ?? '').split(';')[0]
    });
    return response;
}
// GETs with Last-Event-ID from the drop until the client began to close its session.
const resumesBetween = (t0, t1) => exchanges.filter(x => x.method === 'GET' && x.lastEventId && x.t >= t0 && x.t < t1);
const describe = (resumes, tDrop) =>
    resumes.map(x => `GET Last-Event-ID=${short(x.lastEventId)} -> ${x.status} ${x.contentType} +${Math.round(x.t - tDrop)}ms`).join(', ');

// The SDK resumed with GET + Last-Event-ID. Fenced: every such GET is answered 200 (every stream
// the drop cut is resumed). Naive: one 200 is enough (it is a fresh stream anyway).
function checkResumes(resumes, tDrop) {
    const ok = resumes.some(x => x.status === 200) && (naive || resumes.every(x => x.status === 200));
    check(
        `SDK resumed with GET + Last-Event-ID, answered 200${naive ? '' : ' every time'}`,
        ok,
        describe(resumes, tDrop) || 'no GET with Last-Event-ID after the drop'
    );
}

// ---- the proxy's control fifo -----------------------------------------------------------------
function answers(cmd) {
    try {
        return readFileSync(opt['proxy-out'], 'utf8')
            .split('\n')
            .filter(l => l.startsWith(`ok ${cmd}`));
    } catch {
        return [];
    }
}
function proxySend(cmd) {
    const before = answers(cmd).length;
    // Non-blocking: with nobody reading the fifo (the proxy died) this fails at once.
    const fd = openSync(opt['proxy-ctl'], constants.O_WRONLY | constants.O_NONBLOCK);
    try {
        writeSync(fd, `${cmd}\n`);
    } finally {
        closeSync(fd);
    }
    return before;
}
async function proxyAnswer(cmd, before) {
    const deadline = Date.now() + ACK_TIMEOUT_MS;
    while (Date.now() < deadline) {
        const a = answers(cmd);
        if (a.length > before) return Number(a[before].trim().split(/\s+/).pop());
        await sleep(20);
    }
    return null;
}

// ---- one client -------------------------------------------------------------------------------
const transportErrors = [];
async function connect() {
    // The SDK's defaults (initialReconnectionDelay 1000, grow 1.5, max 30000, maxRetries 2),
    // spelled out so the harness states what it runs with; forkscope's `retry: 250` overrides the
    // delay (the SDK prefers a server-sent retry over its backoff).
    const transport = new StreamableHTTPClientTransport(new URL(url), {
        fetch: recordingFetch,
        reconnectionOptions: {
            initialReconnectionDelay: 1000,
            maxReconnectionDelay: 30000,
            reconnectionDelayGrowFactor: 1.5,
            maxRetries: 2
        }
    });
    const client = new Client({ name: 'forkscope-interop-ts', version: '0.0.0' });
    client.onerror = error => transportErrors.push(`${now().toFixed(0)}ms ${error?.message ?? error}`);
    await client.connect(transport);
    note(`ts: initialized, protocolVersion=${transport.protocolVersion} server=${client.getServerVersion()?.name}`);
    return { client, transport };
}

async function disconnect({ client, transport }) {
    await Promise.race([transport.terminateSession().catch(() => {}), sleep(2000)]);
    await Promise.race([client.close().catch(() => {}), sleep(2000)]);
}

async function caseTool() {
    const conn = await connect();
    const progress = [];
    const drop = { sent: false, t: null, at: null, before: 0 };
    const bound = steps * delayMs + Number(opt['lost-after']) * 1000;
    let result = null;
    let error = null;
    try {
        result = await conn.client.callTool({ name: TOOL_NAME, arguments: { steps, delay_ms: delayMs } }, undefined, {
            timeout: bound,
            onprogress: p => {
                progress.push(p.progress);
                if (!drop.sent && p.progress >= dropAt) {
                    drop.sent = true;
                    drop.t = now();
                    drop.at = p.progress;
                    drop.before = proxySend('drop');
                }
            }
        });
    } catch (e) {
        error = `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
    }
    await sleep(100);
    const tEnd = now();
    await disconnect(conn);

    if (!check(`drop sent at progress ${dropAt}`, drop.sent, drop.sent ? `sent at progress ${drop.at}` : `progress seen: ${compact(progress)}`)) return;
    const acked = await proxyAnswer('drop', drop.before);
    check('proxy dropped the connections', acked !== null && acked >= 1, `ok drop ${acked}`);
    checkResumes(resumesBetween(drop.t, tEnd), drop.t);
    const expected = Array.from({ length: steps }, (_, i) => i + 1);
    const same = progress.length === expected.length && progress.every((v, i) => v === expected[i]);
    const text = result?.content?.[0]?.type === 'text' ? result.content[0].text : null;
    const gotResult = result !== null && !result.isError && typeof text === 'string' && text.includes('done');
    const seen = `${progress.length} values: ${compact(progress)}`;
    if (!naive) {
        check(`progress 1..${steps} each exactly once, in order`, same, seen);
        check('the tool call\'s result arrived', gotResult, result ? `text=${JSON.stringify(text)}` : error ?? `no result within ${bound}ms`);
        return;
    }
    if (gotResult) {
        check(
            'damage seen (expected under naive): tool-call result lost',
            false,
            `the result arrived (${JSON.stringify(text)}) after ${(tEnd / 1000).toFixed(1)}s: naive no longer loses it, behaviour changed`
        );
    } else {
        check('damage seen (expected under naive): tool-call result lost', true, `${error ?? 'no result'} (cut at progress ${drop.at}, bound ${bound}ms)`);
    }
    check('damage seen (expected under naive): progress incomplete or repeated', !same, seen);
}

async function waitUntil(predicate, ms) {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
        if (predicate()) return true;
        await sleep(10);
    }
    return predicate();
}

async function caseStream() {
    const conn = await connect();
    const numbers = [];
    const other = [];
    conn.client.setNotificationHandler(LoggingMessageNotificationSchema, n => {
        const bg = n.params?.data?.background;
        if (Number.isInteger(bg)) numbers.push(bg);
        else other.push(JSON.stringify(n.params?.data));
    });
    const waitMs = Number(opt.wait) * 1000;
    const before = Number(opt.before);
    const settle = Number(opt.settle);
    const beforeOk = await waitUntil(() => numbers.length >= before, waitMs);
    let maxBefore = null;
    let countBefore = 0;
    let tDrop = null;
    let acked = null;
    let reached = false;
    if (beforeOk) {
        maxBefore = Math.max(...numbers);
        countBefore = numbers.length;
        tDrop = now();
        const sent = proxySend('drop');
        acked = await proxyAnswer('drop', sent);
        reached = await waitUntil(() => numbers.length > 0 && Math.max(...numbers) >= maxBefore + settle, waitMs);
        await sleep(200); // a late replay still shows up in what is judged
    }
    const tEnd = now();
    await disconnect(conn);

    if (!check(`${before} background notifications before the drop`, beforeOk, beforeOk ? `numbers ${compact(numbers.slice(0, countBefore))}` : `got ${numbers.length}: ${compact(numbers)}`)) return;
    check('proxy dropped the connections', acked !== null && acked >= 1, `ok drop ${acked}`);
    checkResumes(resumesBetween(tDrop, tEnd), tDrop);
    const after = numbers.slice(countBefore);
    check(
        `background counter reached ${maxBefore + settle} after the reconnect`,
        reached,
        reached ? `after the drop: ${compact(after)}` : `within ${opt.wait}s only: ${compact(after)}`
    );
    if (other.length) note(`ts: other log messages: ${other.slice(0, 5).join(' ')}`);
    const { dups, gaps } = analyse(numbers);
    const seen = `seen ${compact(numbers)} (cut after ${maxBefore})`;
    if (!naive) {
        check(
            'background numbers strictly consecutive, no duplicate, no gap',
            !dups.length && !gaps.length && reached,
            seen + (dups.length ? `; duplicates ${compact(dups)}` : '') + (gaps.length ? `; gaps ${JSON.stringify(gaps)}` : '')
        );
        return;
    }
    check(
        'damage seen (expected under naive): background numbers repeat',
        dups.length > 0,
        dups.length
            ? `${seen}; duplicates ${compact(dups)}${gaps.length ? `; gaps ${JSON.stringify(gaps)}` : ''}`
            : `${seen}; no duplicate: naive no longer replays the backlog, behaviour changed`
    );
}

const sdkVersion = (() => {
    try {
        const file = new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url);
        return JSON.parse(readFileSync(file, 'utf8')).version;
    } catch {
        return '?';
    }
})();
note(`ts: @modelcontextprotocol/sdk ${sdkVersion}, node ${process.version}`);

const timer = setTimeout(() => {
    check('case completed', false, `timed out after ${CASE_TIMEOUT_MS / 1000}s`);
    process.exit(1);
}, CASE_TIMEOUT_MS);
try {
    await (opt.case === 'tool' ? caseTool() : caseStream());
} catch (e) {
    check('case completed', false, `${e?.name ?? 'Error'}: ${e?.message ?? e}`);
    console.error(e);
}
clearTimeout(timer);
if (transportErrors.length) {
    note(`ts: the SDK reported ${transportErrors.length} transport error(s): ${transportErrors.slice(0, 4).map(e => short(e, 90)).join(' | ')}`);
}
if (passed === 0 && failed === 0) check('case completed', false, 'no checks executed');
process.exit(failed === 0 ? 0 : 1);
