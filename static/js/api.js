// HTTP helpers: JSON requests with the session cookie, and a fetch-based SSE reader
// (EventSource cannot POST, and POST /chat streams its own turn; following a turn needs
// Last-Event-ID set by the page when it reconnects). Every write sends X-Requested-With.

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

// The terminal event of a turn, or null when the stream closed before it (the caller
// reconnects). `onEvent` sees every event, the terminal one included.
async function readTurn(response, onEvent) {
  for await (const event of readEvents(response.body)) {
    onEvent(event);
    if (event.event === "done" || event.event === "error") return event;
  }
  return null;
}

// POST a turn (/chat, /api/ai/tool-result) as an event stream; calls onEvent for each
// event; resolves with the terminal one, or null when the connection closed first (the
// turn goes on: follow it with followTurn). A refusal before the turn starts (4xx/5xx
// JSON) throws ApiError with the server's status, code and message; a network failure
// throws ApiError with status 0.
export async function streamTurn(path, body, onEvent, signal) {
  const headers = { ...CSRF, Accept: "text/event-stream" };
  let payload = body;
  if (!(body instanceof FormData)) {
    payload = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  const response = await send(path, { method: "POST", credentials: "same-origin", headers, body: payload, signal });
  const type = response.headers.get("Content-Type") || "";
  if (!response.ok || !type.includes("text/event-stream")) {
    const data = await readJson(response);
    if (!response.ok) throw new ApiError(response.status, data);
    const event = { event: "done", data };
    onEvent(event);
    return event;
  }
  return readStream(response, onEvent);
}

// Follow a session's running turn (GET /sessions/<id>/generate/stream): from the turn's
// first event, or after `lastEventId` when reconnecting. Same results as streamTurn.
export async function followTurn(sessionId, turnId, lastEventId, onEvent, signal) {
  const headers = { Accept: "text/event-stream" };
  if (lastEventId) headers["Last-Event-ID"] = String(lastEventId);
  const query = turnId ? `?turn_id=${encodeURIComponent(turnId)}` : "";
  const path = `/sessions/${encodeURIComponent(sessionId)}/generate/stream${query}`;
  const response = await send(path, { method: "GET", credentials: "same-origin", headers, signal });
  if (!response.ok) throw new ApiError(response.status, await readJson(response));
  return readStream(response, onEvent);
}

async function send(path, init) {
  try {
    return await fetch(path, init);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, { error: { code: "network_error", message: "the server could not be reached" } });
  }
}

async function readStream(response, onEvent) {
  try {
    return await readTurn(response, onEvent);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    return null; // the connection dropped mid-stream
  }
}

export function streamChat(body, onEvent, signal) {
  return streamTurn("/chat", body, onEvent, signal);
}

// The user's answer to an interactive widget (SPEC section 8); the continuation streams back.
export function streamToolResult(body, onEvent, signal) {
  return streamTurn("/api/ai/tool-result", body, onEvent, signal);
}

// Stop the session's running turn (SPEC 7a.5); it still ends with its own `done`.
export function cancelTurn(sessionId, turnId) {
  return api("POST", `/sessions/${encodeURIComponent(sessionId)}/cancel`, turnId ? { turn_id: turnId } : {});
}
