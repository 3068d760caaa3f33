// The chat web UI: login, sessions, the message list, the composer and live turn progress.

import { api, ApiError, streamChat, streamToolResult } from "/static/js/api.js";
import { initCodePanel, initProblemsPanel, listActivities } from "/static/js/panels.js";
import { badge, el, formatMs, renderMarkdown, renderToolMessage } from "/static/js/render.js";
import { isWidgetAnswer, isWidgetCall, renderAnswer, renderWidget, resetWidgets, widgetFor } from "/static/js/widgets.js";

const LAST_SESSION_KEY = "orchestrator.lastSession"; // the only thing kept in localStorage
const PAGE_SIZE = 50;
const MAX_IMAGES = 4;
const DEFAULT_SESSION_NAME = "New chat"; // storage/sessions.py DEFAULT_NAME

const $ = (id) => document.getElementById(id);
const state = { user: null, sessions: [], sessionId: null, oldestId: null, busy: false, loads: 0, attachments: [] };

// While a session's messages load, sending waits (a late page would wipe the new turn) and
// #app-view says aria-busy; only the newest load may fill the list.
function loading(on) {
  state.loads += on ? 1 : -1;
  $("app-view").setAttribute("aria-busy", String(state.loads > 0));
}

// ---------------------------------------------------------------- login

async function boot() {
  try {
    state.user = await api("GET", "/api/me");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return showLogin();
    return showLogin(`Cannot reach the server: ${error.message}`);
  }
  showApp();
}

function showLogin(message = "") {
  $("app-view").hidden = true;
  $("login-view").hidden = false;
  $("login-error").textContent = message;
  $("login-token").focus();
}

async function showApp() {
  $("login-view").hidden = true;
  $("app-view").hidden = false;
  $("user-name").textContent = state.user.name;
  loading(true);
  try {
    await loadSessions();
    const last = localStorage.getItem(LAST_SESSION_KEY);
    const initial = state.sessions.find((session) => session.id === last) || state.sessions[0];
    if (initial) await openSession(initial.id);
    else startNewChat();
  } catch (error) {
    flash(`Could not load your conversations: ${error.message}`);
  } finally {
    loading(false);
  }
  $("composer-input").focus();
}

$("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = $("login-token").value.trim();
  try {
    state.user = await api("POST", "/api/login", { token });
  } catch (error) {
    $("login-error").textContent = error.status === 401 ? "That token is not valid." : error.message;
    return;
  }
  $("login-token").value = "";
  showApp();
});

$("logout-button").addEventListener("click", async () => {
  await api("POST", "/api/logout").catch(() => null);
  state.user = null;
  state.sessionId = null;
  $("message-list").replaceChildren();
  showLogin();
});

// ---------------------------------------------------------------- sessions

async function loadSessions() {
  const data = await api("GET", "/sessions");
  state.sessions = data.sessions || [];
  renderSessions();
}

function renderSessions() {
  const list = $("session-list");
  list.replaceChildren();
  const template = $("session-item");
  for (const session of state.sessions) {
    const item = template.content.firstElementChild.cloneNode(true);
    const open = item.querySelector(".session-open");
    const name = session.name || "Untitled";
    open.textContent = name;
    open.title = name;
    if (session.id === state.sessionId) {
      item.classList.add("active");
      open.setAttribute("aria-current", "true");
    }
    open.addEventListener("click", () => {
      openSession(session.id);
      closeDrawer();
    });
    item.querySelector(".session-rename").setAttribute("aria-label", `Rename ${name}`);
    item.querySelector(".session-delete").setAttribute("aria-label", `Delete ${name}`);
    item.querySelector(".session-rename").addEventListener("click", () => startRename(item, session));
    item.querySelector(".session-delete").addEventListener("click", () => confirmDelete(item, session));
    list.append(item);
  }
  const current = state.sessions.find((session) => session.id === state.sessionId);
  $("session-title").textContent = current ? current.name || "Untitled" : "New chat";
}

function startRename(item, session) {
  const input = el("input", { class: "rename-input", "aria-label": "New name", maxlength: "200" });
  input.value = session.name || "";
  item.replaceChildren(input);
  input.focus();
  input.select();
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const name = input.value.trim();
    if (save && name && name !== session.name) {
      try {
        await api("PATCH", `/sessions/${session.id}`, { name });
      } catch (error) {
        flash(`Rename failed: ${error.message}`);
      }
    }
    await loadSessions();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") finish(true);
    if (event.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
}

function confirmDelete(item, session) {
  const yes = el("button", { type: "button", class: "danger", text: "Delete" });
  const no = el("button", { type: "button", text: "Cancel" });
  item.replaceChildren(el("span", { class: "confirm-text", text: `Delete “${session.name || "Untitled"}”?` }), yes, no);
  no.addEventListener("click", () => renderSessions());
  yes.addEventListener("click", async () => {
    try {
      await api("DELETE", `/sessions/${session.id}`);
    } catch (error) {
      flash(`Delete failed: ${error.message}`);
    }
    if (session.id === state.sessionId) startNewChat();
    await loadSessions();
    $("new-session").focus();
  });
  yes.focus();
}

function startNewChat() {
  state.sessionId = null;
  state.oldestId = null;
  localStorage.removeItem(LAST_SESSION_KEY);
  $("message-list").replaceChildren();
  resetWidgets();
  $("load-older").hidden = true;
  updateEmptyHint();
  renderSessions();
}

$("new-session").addEventListener("click", async () => {
  loading(true);
  try {
    const session = await api("POST", "/sessions", {});
    await loadSessions();
    await openSession(session.id);
  } catch (error) {
    flash(`Could not create a chat: ${error.message}`);
  } finally {
    loading(false);
  }
  closeDrawer();
  $("composer-input").focus();
});

async function openSession(id) {
  state.sessionId = id;
  localStorage.setItem(LAST_SESSION_KEY, id);
  renderSessions();
  $("message-list").replaceChildren();
  resetWidgets();
  loading(true);
  try {
    const page = await api("GET", `/sessions/${id}/messages?limit=${PAGE_SIZE}`);
    if (state.sessionId !== id) return; // the user opened another session meanwhile
    for (const message of page.messages) appendMessage(message);
    state.oldestId = page.messages.length ? page.messages[0].id : null;
    $("load-older").hidden = !page.has_more;
  } catch (error) {
    if (state.sessionId !== id) return;
    if (error.status === 404) {
      startNewChat();
      await loadSessions();
      return;
    }
    flash(`Could not load messages: ${error.message}`);
  } finally {
    loading(false);
  }
  updateEmptyHint();
  scrollToEnd();
}

$("load-older").addEventListener("click", async () => {
  if (!state.sessionId || state.oldestId === null) return;
  const page = await api("GET", `/sessions/${state.sessionId}/messages?limit=${PAGE_SIZE}&before=${state.oldestId}`);
  const list = $("message-list");
  const first = list.firstChild;
  for (const message of page.messages) list.insertBefore(messageNode(message), first);
  if (page.messages.length) state.oldestId = page.messages[0].id;
  $("load-older").hidden = !page.has_more;
});

// ---------------------------------------------------------------- messages

function messageNode(message) {
  const role = message.role || "";
  const node = el("article", { class: `message role-${role.endsWith("_tools") ? "tool" : role}`, "data-id": message.id });
  if (role.endsWith("_tools") && isWidgetCall(message)) {
    node.className = "message role-widget";
    node.append(renderWidget(message, answerWidget));
  } else if (role.endsWith("_tools") && isWidgetAnswer(message)) {
    node.className = "message role-answer";
    node.append(renderAnswer(message));
  } else if (role.endsWith("_tools")) {
    node.append(renderToolMessage(message));
  } else if (role === "user") {
    node.append(el("h2", { class: "visually-hidden", text: "You said" }));
    node.append(el("div", { class: "bubble user-text", text: message.content }));
    const images = (message.meta && message.meta.images) || [];
    if (images.length) {
      const strip = el("div", { class: "image-strip" });
      for (const image of images) {
        if (typeof image.path === "string" && /^uploads\/\d+\/[\w.-]+$/.test(image.path)) {
          strip.append(el("img", { src: `/files/${image.path}`, alt: "uploaded image", loading: "lazy" }));
        }
      }
      node.append(strip);
    }
  } else {
    node.append(el("h2", { class: "visually-hidden", text: "Assistant said" }));
    const body = el("div", { class: "bubble markdown" });
    body.append(renderMarkdown(message.content));
    node.append(body);
  }
  return node;
}

function appendMessage(message) {
  const node = messageNode(message);
  $("message-list").append(node);
  return node;
}

function updateEmptyHint() {
  $("empty-hint").hidden = $("message-list").childElementCount > 0;
}

function scrollToEnd() {
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

function flash(text) {
  const node = el("div", { class: "notice notice-error", role: "alert", text });
  $("message-list").append(node);
  updateEmptyHint();
  scrollToEnd();
}

// ---------------------------------------------------------------- live progress of a turn

class Progress {
  constructor() {
    this.started = performance.now();
    this.list = el("ol", { class: "progress-steps" });
    this.title = el("span", { class: "progress-title", text: "Working…" });
    this.node = el(
      "details",
      { class: "progress running", open: true, "aria-live": "polite", "data-testid": "progress" },
      el("summary", {}, el("span", { class: "spinner", "aria-hidden": "true" }), this.title),
      this.list,
    );
    this.running = new Map();
  }

  step(key, text) {
    const item = el("li", { class: "step running" }, el("span", { class: "step-text", text }));
    this.list.append(item);
    if (key) this.running.set(key, item);
    scrollToEnd();
    return item;
  }

  finish(key, text, ok, code, ms) {
    const item = this.running.get(key) || this.step(null, text);
    this.running.delete(key);
    item.classList.remove("running");
    item.querySelector(".step-text").textContent = text;
    item.append(badge(ok, code));
    if (ms !== undefined) item.append(el("span", { class: "muted duration", text: formatMs(ms) }));
  }

  handle({ event, data }) {
    data = data || {};
    const pass = (data.pass ?? 0) + 1;
    switch (event) {
      case "turn.started":
        this.step(null, "Turn started").classList.remove("running");
        break;
      case "provider.request":
        this.step(`provider-${pass}-${data.attempt}`, `Calling the model (pass ${pass}${data.attempt > 1 ? ", retry" : ""})…`);
        break;
      case "provider.response":
        this.finish(
          `provider-${pass}-${data.attempt}`,
          data.ok ? `Model answered (pass ${pass}, ${data.provider || "provider"})` : `Model failed: ${data.failure || "no answer"}`,
          Boolean(data.ok), data.failure, data.elapsed_ms,
        );
        break;
      case "command.detected":
        this.step(null, `Command /${data.name} detected`).classList.remove("running");
        break;
      case "tool.started":
        this.step(`tool-${data.name}`, `Running /${data.name}…`);
        break;
      case "tool.finished":
        this.finish(`tool-${data.name}`, `Tool /${data.name} finished`, Boolean(data.ok), data.code, data.duration_ms);
        break;
      default:
        break;
    }
  }

  end(ok) {
    const elapsed = performance.now() - this.started;
    this.node.classList.remove("running");
    this.node.open = false;
    const steps = this.list.childElementCount;
    this.title.textContent = `${ok ? "Done" : "Failed"}: ${steps} step${steps === 1 ? "" : "s"} in ${formatMs(elapsed)}`;
    for (const item of this.running.values()) item.classList.remove("running");
  }
}

// ---------------------------------------------------------------- sending

async function send(text, files, sessionId) {
  state.busy = true;
  $("send-button").disabled = true;
  const list = $("message-list");
  const pendingUser = appendMessage({ role: "user", content: text });
  if (files.length) {
    const strip = el("div", { class: "image-strip" });
    for (const file of files) strip.append(el("img", { src: URL.createObjectURL(file), alt: "uploaded image" }));
    pendingUser.append(strip);
  }
  const progress = new Progress();
  list.append(progress.node);
  updateEmptyHint();
  scrollToEnd();

  let body;
  if (files.length) {
    body = new FormData();
    body.append("message", text);
    if (sessionId) body.append("session_id", sessionId);
    for (const file of files) body.append("images[]", file, file.name || "image.png");
  } else {
    body = { message: text };
    if (sessionId) body.session_id = sessionId;
  }

  let outcome;
  try {
    outcome = await streamChat(body, (event) => progress.handle(event));
  } catch (error) {
    outcome = { event: "error", data: { ...(error.body || {}), error: { code: error.code || "network_error", message: error.message } } };
  }
  const data = outcome.data || {};
  progress.end(outcome.event === "done");
  if (outcome.event === "done") {
    await nameAfterFirstMessage(data.session_id, text);
    const stored = data.messages || [];
    const userMessage = stored.find((message) => message.role === "user");
    if (userMessage) pendingUser.replaceWith(messageNode(userMessage));
    appendTurnMessages(stored.filter((message) => message.role !== "user"));
  } else {
    list.append(errorNode(data, text, files));
  }
  const newSession = data.session_id && data.session_id !== state.sessionId;
  if (data.session_id) {
    state.sessionId = data.session_id;
    localStorage.setItem(LAST_SESSION_KEY, data.session_id);
  }
  state.busy = false;
  $("send-button").disabled = false;
  scrollToEnd();
  if (newSession || outcome.event === "done") await loadSessions().catch(() => null);
}

// A chat made with "New chat" is named after its first message, as /chat names new sessions.
async function nameAfterFirstMessage(sessionId, text) {
  const session = state.sessions.find((item) => item.id === sessionId);
  if (!session || session.name !== DEFAULT_SESSION_NAME || $("message-list").querySelector(".message[data-id]")) return;
  const name = text.split(/\s+/).join(" ").trim().slice(0, 60);
  if (name) await api("PATCH", `/sessions/${sessionId}`, { name }).catch(() => null);
}

// The stored messages of a finished turn; a widget that asks the user something gets the focus.
function appendTurnMessages(messages) {
  let asked = null;
  for (const message of messages) {
    appendMessage(message);
    if (isWidgetCall(message) && message.meta.status === "pending") asked = widgetFor(message.meta.tool_call_id);
  }
  if (asked) setTimeout(() => asked.focus(), 0);
  return asked;
}

// ---------------------------------------------------------------- answering a widget

// POST the answer to /api/ai/tool-result and show the continuation like a chat turn.
async function answerWidget(widget, value, inputMethod) {
  if (state.busy || state.loads > 0) {
    widget.error("Wait until the current answer has arrived, then try again.");
    return;
  }
  const sessionId = state.sessionId;
  state.busy = true;
  $("send-button").disabled = true;
  widget.busy(true);
  const list = $("message-list");
  const progress = new Progress();
  list.append(progress.node);
  scrollToEnd();

  let outcome = null;
  let refusal = null;
  try {
    outcome = await streamToolResult(widget.body(value, inputMethod), (event) => progress.handle(event));
  } catch (error) {
    refusal = error;
  }
  state.busy = false;
  $("send-button").disabled = false;
  if (state.sessionId !== sessionId) return; // another conversation is on screen now

  if (refusal) {
    // The server refused the answer before any turn ran: say why next to the widget.
    progress.node.remove();
    widget.busy(false);
    const status = refusal.status;
    const message = refusal.message || "the answer could not be sent";
    const code = refusal.code ? `${refusal.code}: ` : "";
    if (status === 409) {
      widget.answered(null, false);
      widget.error(`${code}${message}`);
    } else if (status === 404) {
      widget.closed(`${code}${message}`);
    } else {
      // 400 (the value does not fit), 422 PROFILE_UPDATE_FAILED, 500 TOOL_EXECUTION_FAILED,
      // or the network: the question is still open, the user can answer again.
      widget.error(`${code}${message}`);
      widget.focus();
    }
    scrollToEnd();
    return;
  }

  const data = outcome.data || {};
  progress.end(outcome.event === "done");
  widget.busy(false);
  if (outcome.event === "done") {
    const stored = data.messages || [];
    const result = stored.find((message) => isWidgetAnswer(message));
    widget.answered(result && result.meta && result.meta.output ? result.meta.output.value : value);
    const asked = appendTurnMessages(stored);
    if (!asked) $("composer-input").focus();
  } else {
    // The answer was saved; only the model's next pass failed.
    widget.answered(value);
    const error = data.error || {};
    list.append(
      el("div", { class: "notice notice-error turn-error", role: "alert" },
        el("strong", { text: `Your answer was saved, but the reply failed (${error.code || "error"}).` }),
        el("p", { class: "muted", text: `${error.message || ""} Send a message to go on.`.trim() })),
    );
  }
  updateEmptyHint();
  scrollToEnd();
  await loadSessions().catch(() => null);
}

function errorNode(data, text, files) {
  const error = data.error || {};
  const node = el("div", { class: "notice notice-error turn-error", role: "alert" });
  const retryable = error.code === "provider_unavailable" || error.code === "network_error" || error.code === "stream_closed";
  const explanation =
    error.code === "provider_unavailable"
      ? "The model did not answer. Your message was kept."
      : `The message could not be sent (${error.code || "error"}).`;
  node.append(el("strong", { text: explanation }), el("p", { class: "muted", text: error.message || "" }));
  if (retryable) {
    const retry = el("button", { type: "button", class: "primary retry-button", text: "Retry" });
    retry.addEventListener("click", () => {
      if (state.busy) return;
      node.remove();
      send(text, files, data.session_id || state.sessionId);
    });
    node.append(retry);
    setTimeout(() => retry.focus(), 0);
  }
  return node;
}

// ---------------------------------------------------------------- composer

const input = $("composer-input");

function autoGrow() {
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
}

input.addEventListener("input", autoGrow);
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = input.value;
  if (state.busy || state.loads > 0 || !text.trim()) return;
  const files = state.attachments.slice();
  input.value = "";
  autoGrow();
  state.attachments = [];
  renderAttachments();
  send(text, files, state.sessionId);
});

function addFiles(files) {
  for (const file of files) {
    if (!file.type.startsWith("image/")) continue;
    if (state.attachments.length >= MAX_IMAGES) {
      flash(`At most ${MAX_IMAGES} images per message.`);
      break;
    }
    state.attachments.push(file);
  }
  renderAttachments();
}

function renderAttachments() {
  const box = $("attachments");
  box.replaceChildren();
  state.attachments.forEach((file, index) => {
    const remove = el("button", { type: "button", class: "icon-button remove-attachment", "aria-label": `Remove image ${index + 1}`, text: "✕" });
    remove.addEventListener("click", () => {
      state.attachments.splice(index, 1);
      renderAttachments();
      input.focus();
    });
    box.append(el("div", { class: "attachment" }, el("img", { src: URL.createObjectURL(file), alt: `attached image ${index + 1}` }), remove));
  });
}

$("image-input").addEventListener("change", (event) => {
  addFiles([...event.target.files]);
  event.target.value = "";
});

input.addEventListener("paste", (event) => {
  const files = [...(event.clipboardData?.items || [])]
    .filter((item) => item.kind === "file" && item.type.startsWith("image/"))
    .map((item) => item.getAsFile())
    .filter(Boolean);
  if (files.length) {
    event.preventDefault();
    addFiles(files);
  }
});

// ---------------------------------------------------------------- layout: drawer and side panel

function closeDrawer() {
  document.body.classList.remove("drawer-open");
  $("sessions-toggle").setAttribute("aria-expanded", "false");
}

$("sessions-toggle").addEventListener("click", () => {
  const open = document.body.classList.toggle("drawer-open");
  $("sessions-toggle").setAttribute("aria-expanded", String(open));
  if (open) $("new-session").focus();
});

document.addEventListener("click", (event) => {
  if (!document.body.classList.contains("drawer-open")) return;
  if ($("sessions-panel").contains(event.target) || $("sessions-toggle").contains(event.target)) return;
  closeDrawer();
});

function showPanel(which) {
  const panel = $("side-panel");
  const same = !panel.hidden && panel.dataset.view === which;
  panel.hidden = same;
  panel.dataset.view = which;
  $("code-panel").hidden = which !== "code";
  $("problems-panel").hidden = which !== "problems";
  $("side-title").textContent = which === "code" ? "Code" : "Problems";
  $("code-toggle").setAttribute("aria-expanded", String(!same && which === "code"));
  $("problems-toggle").setAttribute("aria-expanded", String(!same && which === "problems"));
  document.body.classList.toggle("panel-open", !same);
  if (!same) (which === "code" ? $("run-code") : $("activity-id")).focus();
  if (!same && which === "problems") listActivities();
}

$("code-toggle").addEventListener("click", () => showPanel("code"));
$("problems-toggle").addEventListener("click", () => showPanel("problems"));
$("side-close").addEventListener("click", () => {
  const which = $("side-panel").dataset.view;
  showPanel(which);
  (which === "code" ? $("code-toggle") : $("problems-toggle")).focus();
});

document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape") return;
  if (document.body.classList.contains("drawer-open")) {
    closeDrawer();
    $("sessions-toggle").focus();
  } else if (!$("side-panel").hidden) {
    $("side-close").click();
  }
});

initCodePanel();
initProblemsPanel();
boot();
