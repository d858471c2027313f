#!/usr/bin/env node
// An MCP server built on the official TypeScript SDK (npm `@modelcontextprotocol/sdk`), for
// `forkscope probe`. Streamable HTTP through the SDK's StreamableHTTPServerTransport, a session
// per transport as the SDK's examples do, each with the InMemoryEventStore the SDK ships
// (`@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js`). Nothing is added to the
// transport: what the probe finds is what the SDK does. Two tools give the probe events:
//
//   progress_task {steps, delay_ms}: a progress notification per step on the call's stream;
//   emit_standalone {count, delay_ms, label}: returns at once, then sends `count`
//     notifications/resources/updated (uri urn:forkscope-probe:<label>:<n>) on the session's
//     standalone GET stream.
//
// `--names other` names them as another server might, for the probe to find by schema alone:
//   countdown {count, delay_ms}: the progress tool;
//   ping_all {count, delay_ms}: notifies the standalone stream with urn:ping-all:<n>, unlabelled.
//
// Usage: node probe_server.mjs --port N [--store per-session|shared] [--names probe|other]

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import * as z from 'zod';

const { values } = parseArgs({
    options: {
        port: { type: 'string' },
        store: { type: 'string', default: 'per-session' },
        names: { type: 'string', default: 'probe' },
    },
});
if (!values.port || !['per-session', 'shared'].includes(values.store) || !['probe', 'other'].includes(values.names)) {
    console.error('usage: node probe_server.mjs --port N [--store per-session|shared] [--names probe|other]');
    process.exit(2);
}
const shared = new InMemoryEventStore();
const MAX_BODY = 1 << 20;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function mcpServer() {
    // resources: the standalone stream's notifications are resources/updated, which the SDK only
    // sends for a server that declares the capability.
    const server = new McpServer(
        { name: 'forkscope-probe-typescript', version: '1' },
        { capabilities: { resources: { subscribe: true } } },
    );
    const other = values.names === 'other';
    server.registerTool(
        other ? 'countdown' : 'progress_task',
        other
            ? {
                  description: 'Counts to count, reporting each number as it goes.',
                  inputSchema: { count: z.number().int().min(1).max(10000).default(200), delay_ms: z.number().int().min(0).max(60000).default(0) },
              }
            : {
                  description: 'Sends a progress notification per step, one every delay_ms milliseconds.',
                  inputSchema: { steps: z.number().int().min(1).max(10000).default(5), delay_ms: z.number().int().min(0).max(60000).default(100) },
              },
        async (args, extra) => {
            const steps = other ? args.count : args.steps;
            const delay_ms = args.delay_ms;
            const token = extra._meta?.progressToken;
            for (let n = 1; n <= steps; n++) {
                if (delay_ms > 0) await sleep(delay_ms);
                if (token !== undefined) {
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress: n, total: steps, message: `step ${n} of ${steps}` },
                    });
                }
            }
            return { content: [{ type: 'text', text: `done after ${steps} steps` }] };
        },
    );
    server.registerTool(
        other ? 'ping_all' : 'emit_standalone',
        other
            ? {
                  description: "Pings this session's clients count times on the standalone stream, in the background.",
                  inputSchema: { count: z.number().int().min(1).max(10000).default(5), delay_ms: z.number().int().min(0).max(60000).default(50) },
              }
            : {
                  description: 'Sends count numbered notifications on the session standalone stream, in the background.',
                  inputSchema: { count: z.number().int().min(1).max(10000).default(10), delay_ms: z.number().int().min(0).max(60000).default(20), label: z.string().max(64).default('x') },
              },
        async ({ count, delay_ms, label }) => {
            const uri = (n) => (other ? `urn:ping-all:${n}` : `urn:forkscope-probe:${label}:${n}`);
            (async () => {
                for (let n = 1; n <= count; n++) {
                    await sleep(delay_ms);
                    try {
                        await server.server.sendResourceUpdated({ uri: uri(n) });
                    } catch {
                        return; // the session ended
                    }
                }
            })();
            return { content: [{ type: 'text', text: `emitting ${count}` }] };
        },
    );
    return server;
}

const transports = new Map();

async function readBody(req) {
    let size = 0;
    const chunks = [];
    for await (const chunk of req) {
        size += chunk.length;
        if (size > MAX_BODY) throw new Error('body too large');
        chunks.push(chunk);
    }
    return chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
}

function fail(res, status, message) {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

const http = createServer(async (req, res) => {
    try {
        if (new URL(req.url, 'http://x').pathname !== '/mcp') return fail(res, 404, 'not found');
        const sid = req.headers['mcp-session-id'];
        let body;
        if (req.method === 'POST') body = await readBody(req);
        let transport = sid ? transports.get(sid) : undefined;
        if (!transport) {
            if (req.method === 'POST' && !sid && isInitializeRequest(body)) {
                transport = new StreamableHTTPServerTransport({
                    sessionIdGenerator: () => randomUUID(),
                    eventStore: values.store === 'shared' ? shared : new InMemoryEventStore(),
                    onsessioninitialized: (id) => transports.set(id, transport),
                });
                transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
                await mcpServer().connect(transport);
            } else if (sid) {
                return fail(res, 404, 'Session not found');
            } else {
                return fail(res, 400, 'Bad Request: No valid session ID provided');
            }
        }
        await transport.handleRequest(req, res, body);
    } catch (e) {
        if (!res.headersSent) fail(res, 400, String(e?.message ?? e));
    }
});
http.listen(Number(values.port), '127.0.0.1', () => console.log(`listening on 127.0.0.1:${values.port}`));
