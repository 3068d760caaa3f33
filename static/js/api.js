// HTTP helpers: JSON requests with the session cookie, and a fetch-based SSE reader
// (EventSource cannot POST, and POST /chat streams its own turn).

const CSRF = { "X-Requested-With": "fetch" };

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || `http_${status}`;
    this.body = body || {};
  }
}

async function readJson(response) {
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return { error: { code: `http_${response.status}`, message: text.slice(0, 200) } };
  }
}

export async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { ...CSRF, Accept: "application/json" } };
  if (body instanceof FormData) {
    init.body = body;
  } else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  const data = await readJson(response);
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// Parse an SSE byte stream into {id, event, data} objects (data JSON-decoded when possible).
export async function* readEvents(stream) {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = parseBlock(block);
        if (event) yield event;
      }
    }
    const last = parseBlock(buffer);
    if (last) yield last;
  } finally {
    reader.releaseLock();
  }
}

function parseBlock(block) {
  let id = null;
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") id = value;
    else if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  const raw = data.join("\n");
  let parsed = raw;
  try {
    parsed = JSON.parse(raw);
  } catch {
    /* keep the text */
  }
  return { id, event: name, data: parsed };
}

// POST a turn (/chat, /api/ai/tool-result) as an event stream; calls onEvent for each
// event; resolves with the terminal one. A refusal before the turn starts (4xx/5xx JSON)
// throws ApiError with the server's status, code and message.
export async function streamTurn(path, body, onEvent) {
  const headers = { ...CSRF, Accept: "text/event-stream" };
  let payload = body;
  if (!(body instanceof FormData)) {
    payload = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, { method: "POST", credentials: "same-origin", headers, body: payload });
  const type = response.headers.get("Content-Type") || "";
  if (!response.ok || !type.includes("text/event-stream")) {
    const data = await readJson(response);
    if (!response.ok) throw new ApiError(response.status, data);
    return { event: "done", data };
  }
  for await (const event of readEvents(response.body)) {
    onEvent(event);
    if (event.event === "done" || event.event === "error") return event;
  }
  throw new ApiError(0, { error: { code: "stream_closed", message: "the connection closed before the answer arrived" } });
}

export function streamChat(body, onEvent) {
  return streamTurn("/chat", body, onEvent);
}

// The user's answer to an interactive widget (SPEC section 8); the continuation streams back.
export function streamToolResult(body, onEvent) {
  return streamTurn("/api/ai/tool-result", body, onEvent);
}
