// An unmodified client of the TypeScript SDK, through the proxy with undici's ProxyAgent when
// HTTP_PROXY is set (Node's own fetch reads no proxy variable), or over stdio; runs a plan and
// prints what it got, as tests/mcp_demo/client.py does for the Python SDK.
//
//   node client.mjs '{"url": "http://127.0.0.1:PORT/mcp", "steps": [...]}'
//   node client.mjs '{"stdio": ["stbproxy", "mcp-stdio", ..., "--", "node", "server.js"], "steps": [...]}'
//
// Steps: ["tools"], ["call", NAME, ARGUMENTS, OPTIONS], ["read", URI], ["prompt", NAME, ARGUMENTS],
// ["ping"], ["set_level", LEVEL], ["subscribe", URI]. OPTIONS of a call: {"progress": true}
// (the progress events it got are printed with it), {"timeout": MS, "reset": true} (a timeout
// that progress resets). The plan's "sampling" is the text this client's model answers a
// server's sampling/createMessage with; "elicitation" the content it accepts an
// elicitation/create with; "roots" the roots it lists. The first line printed is the
// initialize's outcome, the last the session's end.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema, CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { fetch as undiciFetch, ProxyAgent } from "undici";

const plan = JSON.parse(process.argv[2]);
const TIMEOUT = 20000;

function transportOf(plan) {
  if (plan.stdio) {
    const [command, ...args] = plan.stdio;
    return new StdioClientTransport({ command, args, env: { ...process.env, ...(plan.env || {}) }, stderr: "inherit" });
  }
  const proxy = process.env.HTTP_PROXY || process.env.http_proxy;
  const options = { requestInit: { headers: plan.headers || {} } };
  if (proxy) {  // an absolute-form request to the proxy, as HTTP_PROXY clients send it (tunnel: CONNECT first)
    const dispatcher = new ProxyAgent({ uri: proxy, proxyTunnel: Boolean(plan.tunnel) });
    options.fetch = (url, init) => undiciFetch(url, { ...init, dispatcher });
  }
  return new StreamableHTTPClientTransport(new URL(plan.url), options);
}

function failure(error) {
  const out = { error: { code: error.code ?? null, message: String(error.message ?? error) } };
  if (error.data !== undefined) out.error.data = error.data;
  return out;
}

async function step(client, [what, ...rest]) {
  const options = { timeout: TIMEOUT };
  switch (what) {
    case "tools": return await client.listTools(undefined, options);
    case "read": return await client.readResource({ uri: rest[0] }, options);
    case "prompt": return await client.getPrompt({ name: rest[0], arguments: rest[1] || {} }, options);
    case "ping": return await client.ping(options);
    case "set_level": return await client.setLoggingLevel(rest[0], options);
    case "subscribe": return await client.subscribeResource({ uri: rest[0] }, options);
    case "call": {
      const [name, args, extra = {}] = rest;
      const progress = [];
      const callOptions = { timeout: extra.timeout ?? TIMEOUT, resetTimeoutOnProgress: Boolean(extra.reset) };
      if (extra.progress || extra.reset) callOptions.onprogress = (p) => progress.push(p);
      const result = await client.callTool({ name, arguments: args || {} }, CallToolResultSchema, callOptions);
      return extra.progress ? { result, progress } : result;
    }
    default: throw new Error(`unknown step ${what}`);
  }
}

async function main() {
  const capabilities = { sampling: {}, elicitation: {}, roots: { listChanged: true } };
  const client = new Client({ name: "ts-sdk-test-client", version: "1.0.0" }, { capabilities });
  const asked = [];
  client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
    asked.push(request.method);
    return { role: "assistant", model: "test-model", stopReason: "endTurn",
             content: { type: "text", text: plan.sampling ?? "a sampled answer" } };
  });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.method);
    return { action: "accept", content: plan.elicitation ?? { name: "Ada" } };
  });
  client.setRequestHandler(ListRootsRequestSchema, async (request) => {
    asked.push(request.method);
    return { roots: plan.roots ?? [{ uri: "file:///tmp/project", name: "project" }] };
  });
  const transport = transportOf(plan);
  const out = [];
  try {
    await client.connect(transport, { timeout: TIMEOUT });
    out.push({ initialized: client.getServerVersion()?.name ?? null, session: transport.sessionId ?? null });
  } catch (error) {
    out.push({ initialize_error: failure(error).error });
    console.log(JSON.stringify(out));
    process.exit(0);
  }
  for (const s of plan.steps) {
    try {
      out.push(await step(client, s));
    } catch (error) {
      out.push(failure(error));
    }
  }
  out.push({ asked, session: transport.sessionId ?? null });
  try {
    if (transport.terminateSession) await transport.terminateSession();
    await client.close();
  } catch (error) {
    out.push({ close_error: String(error.message ?? error) });
  }
  console.log(JSON.stringify(out));
  process.exit(0);
}

main();
