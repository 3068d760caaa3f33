// The chat web UI: login, sessions, the message list and the composer. A turn in progress
// (its events, the growing answer, Stop, reconnecting) is a LiveTurn (live.js); this file
// decides where a turn's messages go when it ends: into its own chat, if that is on screen.

import { api, ApiError } from "/static/js/api.js";
import { LiveTurn } from "/static/js/live.js";
import {
  flash, hasMessage, isPinned, messageList, messageNode, scrollToEnd, setWidgetHandler, updateEmptyHint, visibleMessages,
} from "/static/js/messages.js";
import { initComposer, restoreDraft } from "/static/js/composer.js";
import { closeDrawer, initLayout } from "/static/js/layout.js";
import { initGenerate } from "/static/js/generate.js";
import { initCodePanel, initProblemsPanel, loadActivity } from "/static/js/panels.js";
import { initTasksPanel } from "/static/js/tasks.js";
import { el } from "/static/js/render.js";
import { isWidgetAnswer, resetWidgets, widgetFor } from "/static/js/widgets.js";

const LAST_SESSION_KEY = "orchestrator.lastSession"; // the only thing kept in localStorage
const PAGE_SIZE = 50;
const DEFAULT_SESSION_NAME = "New chat"; // storage/sessions.py DEFAULT_NAME
const RETRYABLE = new Set(["provider_unavailable", "storage_unavailable", "network_error", "stream_closed", "rate_limited"]);

const $ = (id) => document.getElementById(id);
const state = {
  user: null,
  sessions: [],
  sessionId: null, // the chat on screen (null: a new chat not created yet)
  view: 0, // bumped whenever another chat is put on screen
  page: 0, // bumped by each load of the message list; only the newest may fill it
  pageLoad: null, // that load, while it runs
  oldestId: null,
  loads: 0,
  turns: new Set(), // every LiveTurn this page follows, in any chat
};

// While a session's messages load, sending waits (a late page would wipe the new turn) and
// #app-view says aria-busy.
function loading(on) {
  state.loads += on ? 1 : -1;
  $("app-view").setAttribute("aria-busy", String(state.loads > 0));
}

// What a LiveTurn asks of the page.
const host = {
  onScreen(turn) {
    return turn.sessionId ? turn.sessionId === state.sessionId : turn.view === state.view;
  },
  // The first turn of a new chat created it: that chat is now the one on screen.
  sessionKnown(turn) {
    if (state.sessionId === null && state.view === turn.view) {
      state.sessionId = turn.sessionId;
      localStorage.setItem(LAST_SESSION_KEY, turn.sessionId);
    }
    loadSessions().catch(() => null);
  },
  // replay.gap: some events were lost, so the messages come from the server again.
  reload(turn) {
    if (host.onScreen(turn) && turn.sessionId) showMessages(turn.sessionId);
  },
  changed() {
    updateComposer();
  },
  notice(turn, text) {
    if (host.onScreen(turn)) flash(text);
  },
};

function currentTurn() {
  for (const turn of state.turns) if (host.onScreen(turn)) return turn;
  return null;
}

function liveTurnFor(sessionId) {
  for (const turn of state.turns) if (turn.sessionId === sessionId) return turn;
  return null;
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
  for (const turn of state.turns) turn.close(); // the turns go on on the server
  state.turns.clear();
  state.user = null;
  state.sessionId = null;
  state.view += 1;
  messageList().replaceChildren();
  updateComposer();
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
    item.dataset.sessionId = session.id;
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
  state.view += 1;
  state.page += 1;
  state.oldestId = null;
  localStorage.removeItem(LAST_SESSION_KEY);
  messageList().replaceChildren();
  resetWidgets();
  $("load-older").hidden = true;
  updateEmptyHint();
  renderSessions();
  updateComposer();
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
  state.view += 1;
  localStorage.setItem(LAST_SESSION_KEY, id);
  renderSessions();
  await showMessages(id);
}

// Fill the list with the chat's newest page of messages, then its turn in progress: the one
// this page follows already, or (after a reload, or a turn started elsewhere) the session's
// `active_turn`, which is then followed from its first event.
function showMessages(id) {
  const token = (state.page += 1);
  messageList().replaceChildren();
  resetWidgets();
  updateComposer();
  loading(true);
  const load = (async () => {
    try {
      const [page, session] = await Promise.all([
        api("GET", `/sessions/${id}/messages?limit=${PAGE_SIZE}`),
        liveTurnFor(id) ? null : api("GET", `/sessions/${id}`),
      ]);
      if (state.page !== token) return; // the user opened another chat meanwhile
      const list = messageList();
      list.replaceChildren();
      for (const message of visibleMessages(page.messages)) list.append(messageNode(message));
      state.oldestId = page.messages.length ? page.messages[0].id : null;
      $("load-older").hidden = !page.has_more;
      let turn = liveTurnFor(id);
      if (!turn && session && session.active_turn && session.active_turn.turn_id) {
        turn = followTurn(id, session.active_turn.turn_id);
      }
      if (turn) turn.attach(list);
    } catch (error) {
      if (state.page !== token) return;
      if (error.status === 404) {
        startNewChat();
        await loadSessions();
        return;
      }
      flash(`Could not load messages: ${error.message}`);
    } finally {
      loading(false);
    }
    if (state.page !== token) return;
    updateEmptyHint();
    updateComposer();
    scrollToEnd();
  })();
  state.pageLoad = load;
  return load;
}

$("load-older").addEventListener("click", async () => {
  if (!state.sessionId || state.oldestId === null) return;
  const page = await api("GET", `/sessions/${state.sessionId}/messages?limit=${PAGE_SIZE}&before=${state.oldestId}`);
  const list = messageList();
  const first = list.firstChild;
  for (const message of visibleMessages(page.messages)) {
    if (!hasMessage(message.id)) list.insertBefore(messageNode(message), first);
  }
  if (page.messages.length) state.oldestId = page.messages[0].id;
  $("load-older").hidden = !page.has_more;
});

// ---------------------------------------------------------------- turns

// Follow a turn this page did not start (a reload, another tab, a busy chat).
function followTurn(sessionId, turnId) {
  const turn = new LiveTurn({ sessionId, turnId, view: state.view, host });
  state.turns.add(turn);
  runTurn(turn, () => turn.follow()).then((outcome) => settleChatTurn(turn, outcome, null));
  return turn;
}

// Run a turn to its end; the page stops counting it as live before anything is drawn.
async function runTurn(turn, start) {
  updateComposer();
  let outcome = null;
  try {
    outcome = await start();
  } finally {
    state.turns.delete(turn);
    updateComposer();
  }
  // A page load under way may not hold this turn's messages: let it land first.
  if (state.pageLoad) await state.pageLoad.catch(() => null);
  return outcome;
}

// `retryOf`: the id of the stored user message a Retry answers again (stored once, not twice).
function sendBody(text, files, sessionId, retryOf = null) {
  if (retryOf && sessionId) return { message: text, session_id: sessionId, retry_of: retryOf };
  if (!files.length) return sessionId ? { message: text, session_id: sessionId } : { message: text };
  const body = new FormData();
  body.append("message", text);
  if (sessionId) body.append("session_id", sessionId);
  for (const file of files) body.append("images[]", file, file.name || "image.png");
  return body;
}

function pendingUserNode(text, files) {
  const node = messageNode({ role: "user", content: text });
  node.classList.add("pending");
  if (files.length) {
    const strip = el("div", { class: "image-strip" });
    for (const file of files) strip.append(el("img", { src: URL.createObjectURL(file), alt: "uploaded image" }));
    node.append(strip);
  }
  return node;
}

// Send a message to the chat on screen. `retry`: the failed turn whose message this sends
// again; its bubble is reused, so the message shows once.
async function send(text, files, retry = null) {
  const sessionId = retry ? retry.sessionId : state.sessionId;
  const firstTurn = retry ? retry.firstTurn : !messageList().querySelector(".message[data-id]");
  const list = messageList();
  let userNode = retry && retry.userNode && retry.userNode.isConnected ? retry.userNode : null;
  if (userNode) {
    retry.progress.remove();
  } else {
    userNode = pendingUserNode(text, files);
    list.append(userNode);
  }
  const turn = new LiveTurn({ sessionId, view: state.view, host, userNode });
  state.turns.add(turn);
  list.append(turn.progress.node);
  updateEmptyHint();
  scrollToEnd();
  const retryOf = retry ? retry.userMessageId : null;
  const outcome = await runTurn(turn, () => turn.post("/chat", sendBody(text, files, sessionId, retryOf)));
  await settleChatTurn(turn, outcome, { text, files, firstTurn });
}

// A chat turn ended: its stored messages replace the live ones if its chat is on screen
// (else they come from the server when the chat is opened again). `sent`: {text, files,
// firstTurn} when this page sent the message (then a failure offers Retry).
async function settleChatTurn(turn, outcome, sent) {
  if (!outcome) return turn.end("failed"); // the page let go of it (signed out)
  const data = outcome.data || {};
  const onScreen = host.onScreen(turn);
  switch (outcome.event) {
    case "done": {
      const stopped = Boolean(data.stopped);
      turn.end(stopped ? "stopped" : "done");
      if (!host.onScreen(turn)) {
        // nothing to draw: the messages come from the server when the chat is opened
      } else if (!Array.isArray(data.messages)) {
        await showMessages(turn.sessionId);
      } else {
        turn.showStored(data.messages);
        if (stopped && !data.messages.some((message) => message.role === "assistant")) {
          messageList().append(el("p", { class: "notice stopped-empty", text: "Stopped before the model wrote anything." }));
        }
      }
      await nameAfterFirstMessage(turn.sessionId, data.messages, sent);
      break;
    }
    case "gone": // the server no longer knows the turn: it is over, the messages say how
      turn.end("done");
      if (onScreen) await showMessages(turn.sessionId);
      break;
    case "refused":
      refused(turn, outcome.error, sent);
      break;
    default:
      turn.end("failed");
      if (onScreen) {
        turn.dropAnswer();
        messageList().append(errorNode(data, sent, turn));
      }
  }
  if (host.onScreen(turn)) {
    updateEmptyHint();
    if (isPinned() || outcome.event !== "done") scrollToEnd();
  }
  await loadSessions().catch(() => null);
}

// POST /chat was turned down before a turn ran (nothing was stored).
function refused(turn, error, sent) {
  const onScreen = host.onScreen(turn);
  if (error.code === "turn_in_progress" && turn.sessionId) {
    // Another turn of this chat is running (another tab): show it; the message goes back
    // to the composer.
    turn.progress.node.remove();
    if (turn.userNode) turn.userNode.remove();
    if (sent && onScreen) restoreDraft(sent.text, sent.files);
    if (onScreen) {
      messageList().append(el("p", { class: "notice", role: "status", text: "This chat is still answering an earlier message; your message is back in the box." }));
    }
    const running = error.body && error.body.turn_id;
    if (!liveTurnFor(turn.sessionId) && running) {
      const follower = followTurn(turn.sessionId, running);
      if (onScreen) follower.attach(messageList());
    }
    return;
  }
  turn.end("failed");
  if (onScreen) messageList().append(errorNode({ ...error.body, error: { code: error.code, message: error.message } }, sent, turn));
}

// A chat made with "New chat" is named after its first message, as /chat names new sessions:
// the message this page sent first, or (a turn followed after a reload) a stored user
// message with nothing before it. Always the turn's own chat, whichever is on screen.
async function nameAfterFirstMessage(sessionId, messages, sent) {
  const session = state.sessions.find((item) => item.id === sessionId);
  if (!session || session.name !== DEFAULT_SESSION_NAME) return;
  let text = sent && sent.firstTurn ? sent.text : null;
  const user = Array.isArray(messages) ? messages.find((message) => message.role === "user") : null;
  if (!text && !sent && user) {
    const before = await api("GET", `/sessions/${sessionId}/messages?limit=1&before=${user.id}`).catch(() => null);
    if (before && before.messages.length === 0) text = user.content;
  }
  const name = String(text || "").split(/\s+/).join(" ").trim().slice(0, 60);
  if (name) await api("PATCH", `/sessions/${sessionId}`, { name }).catch(() => null);
}

function errorNode(data, sent, turn) {
  const error = data.error || {};
  const node = el("div", { class: "notice notice-error turn-error", role: "alert" });
  const kept = data.user_message_id !== undefined || error.code === "provider_unavailable";
  let explanation;
  if (!sent) explanation = `The reply failed (${error.code || "error"}).`;
  else if (error.code === "provider_unavailable") explanation = "The model did not answer. Your message was kept.";
  else if (kept) explanation = `The reply failed (${error.code || "error"}). Your message was kept.`;
  else explanation = `The message could not be sent (${error.code || "error"}).`;
  node.append(el("strong", { text: explanation }), el("p", { class: "muted", text: error.message || "" }));
  if (sent && RETRYABLE.has(error.code)) {
    const retry = el("button", { type: "button", class: "primary retry-button", text: "Retry" });
    retry.addEventListener("click", () => {
      if (currentTurn() || state.loads > 0) return;
      node.remove();
      send(sent.text, sent.files, {
        sessionId: data.session_id || turn.sessionId || state.sessionId,
        firstTurn: sent.firstTurn,
        userNode: turn.userNode,
        progress: turn.progress.node,
        userMessageId: data.user_message_id || null,
      });
    });
    node.append(retry);
    setTimeout(() => retry.focus(), 0);
  }
  return node;
}

// ---------------------------------------------------------------- answering a widget

// POST the answer to /api/ai/tool-result and show the continuation like a chat turn.
async function answerWidget(widget, value, inputMethod) {
  if (currentTurn() || state.loads > 0) {
    widget.error("Wait until the current answer has arrived, then try again.");
    return;
  }
  const callId = widget.message.meta.tool_call_id;
  const turn = new LiveTurn({ sessionId: state.sessionId, view: state.view, host });
  state.turns.add(turn);
  widget.busy(true);
  messageList().append(turn.progress.node);
  scrollToEnd();
  const outcome = await runTurn(turn, () => turn.post("/api/ai/tool-result", widget.body(value, inputMethod)));
  if (!outcome) return turn.end("failed");
  const onScreen = host.onScreen(turn);
  widget = widgetFor(callId) || widget; // the chat may have been drawn again meanwhile

  if (outcome.event === "refused") {
    const refusal = outcome.error;
    turn.progress.node.remove();
    if (!onScreen) return;
    // The server refused the answer before any turn ran: say why next to the widget.
    widget.busy(false);
    const message = refusal.message || "the answer could not be sent";
    const code = refusal.code ? `${refusal.code}: ` : "";
    if (refusal.code === "turn_in_progress") {
      widget.error("This chat is still answering; answer again when it is done.");
      const running = refusal.body && refusal.body.turn_id;
      if (running && !liveTurnFor(turn.sessionId)) followTurn(turn.sessionId, running).attach(messageList());
    } else if (refusal.status === 409) {
      widget.answered(null, false);
      widget.error(`${code}${message}`);
    } else if (refusal.status === 404) {
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
  const done = outcome.event === "done";
  turn.end(done ? (data.stopped ? "stopped" : "done") : "failed");
  if (onScreen) {
    widget.busy(false);
    if (done) {
      const stored = data.messages || [];
      const result = stored.find((message) => isWidgetAnswer(message));
      widget.answered(result && result.meta && result.meta.output ? result.meta.output.value : value);
      const asked = turn.showStored(stored);
      if (!asked) $("composer-input").focus();
    } else if (outcome.event === "gone") {
      await showMessages(turn.sessionId);
    } else {
      // The answer was saved; only the model's next pass failed.
      widget.answered(value);
      turn.dropAnswer();
      const error = data.error || {};
      messageList().append(
        el("div", { class: "notice notice-error turn-error", role: "alert" },
          el("strong", { text: `Your answer was saved, but the reply failed (${error.code || "error"}).` }),
          el("p", { class: "muted", text: `${error.message || ""} Send a message to go on.`.trim() })),
      );
    }
    updateEmptyHint();
    scrollToEnd();
  }
  await loadSessions().catch(() => null);
}

setWidgetHandler(answerWidget);

// ---------------------------------------------------------------- composer: Send and Stop

// While the chat on screen has a turn running, Send becomes Stop (the same place, so the
// keyboard focus moves with it).
function updateComposer() {
  const turn = currentTurn();
  const sendButton = $("send-button");
  const stopButton = $("stop-button");
  const focused = document.activeElement;
  sendButton.hidden = Boolean(turn);
  stopButton.hidden = !turn;
  const stopping = Boolean(turn && turn.stopping);
  stopButton.setAttribute("aria-disabled", String(stopping));
  stopButton.textContent = stopping ? "Stopping…" : "Stop";
  if (turn && focused === sendButton) stopButton.focus();
  if (!turn && focused === stopButton) $("composer-input").focus();
}

$("stop-button").addEventListener("click", () => {
  const turn = currentTurn();
  if (turn && !turn.stopping) turn.requestCancel();
});

initComposer({ canSend: () => !currentTurn() && state.loads === 0, onSend: (text, files) => send(text, files) });
initLayout();
initCodePanel();
initProblemsPanel();
initGenerate((activityId) => {
  loadActivity(activityId);
  loadSessions().catch(() => null); // the job made a "Practice: …" chat
});
initTasksPanel();
boot();
