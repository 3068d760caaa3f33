// The conversations list: load it, draw it, open, create, rename and delete a chat, and name a
// new chat after its first message. Opening a chat hands over to history.js (through
// show_messages.js).

import { api } from "/static/js/api.js";
import { updateComposer } from "/static/js/composer.js";
import { closeDrawer } from "/static/js/layout.js";
import { flash, messageList, updateEmptyHint } from "/static/js/messages.js";
import { el } from "/static/js/render.js";
import { showMessages } from "/static/js/show_messages.js";
import { LAST_SESSION_KEY, loading, state } from "/static/js/state.js";
import { resetWidgets } from "/static/js/widgets.js";

const $ = (id) => document.getElementById(id);
const DEFAULT_SESSION_NAME = "New chat"; // storage/sessions.py DEFAULT_NAME

// `early`: the list already asked for (a promise of it, or of null when that failed).
export async function loadSessions(early = null) {
  const data = (early && (await early)) || (await api("GET", "/sessions"));
  state.sessions = data.sessions || [];
  renderSessions();
}

// The list again after something changed it in the background (a turn ended, a job made a
// chat): the list on screen stays as it was when that fails, so the failure is only logged.
export async function refreshSessions() {
  try {
    await loadSessions();
  } catch (error) {
    console.error("Could not refresh the conversations list:", error);
  }
}

// The list again after the user changed it (rename, delete): a failure is said in the chat.
async function reloadSessionsOrSay() {
  try {
    await loadSessions();
  } catch (error) {
    flash(`Could not reload your conversations: ${error.message}`);
  }
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
    const pin = item.querySelector(".session-pin");
    pin.setAttribute("aria-pressed", String(Boolean(session.pinned_at)));
    pin.setAttribute("aria-label", `${session.pinned_at ? "Unpin" : "Pin"} ${name}`);
    pin.addEventListener("click", () => togglePin(session));
    if (session.pinned_at) item.classList.add("pinned");
    item.querySelector(".session-rename").setAttribute("aria-label", `Rename ${name}`);
    item.querySelector(".session-delete").setAttribute("aria-label", `Delete ${name}`);
    item.querySelector(".session-rename").addEventListener("click", () => startRename(item, session));
    item.querySelector(".session-delete").addEventListener("click", () => confirmDelete(item, session));
    list.append(item);
  }
  const current = state.sessions.find((session) => session.id === state.sessionId);
  const title = current ? current.name || "Untitled" : "New chat";
  // #session-title is a live region: it speaks when the chat's name changes, not on every redraw.
  if ($("session-title").textContent !== title) $("session-title").textContent = title;
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
    await reloadSessionsOrSay();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") finish(true);
    if (event.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
}

async function togglePin(session) {
  try {
    await api("PATCH", `/sessions/${session.id}`, { pinned: !session.pinned_at });
  } catch (error) {
    flash(`Pin failed: ${error.message}`);
  }
  await reloadSessionsOrSay();
  const item = [...$("session-list").children].find((node) => node.dataset.sessionId === session.id);
  if (item) item.querySelector(".session-pin").focus(); // the list moved: the focus stays on the chat's pin
}

// Delete asks first, in a modal dialog (focus inside it, Escape or Cancel keeps the chat and
// gives the focus back to the Delete button that opened it).
// The cleanup of the delete dialog's current opening. A dialog's `close` event is queued, not
// sent at once: closed with Escape and opened again at once, the old opening's `close` arrives
// while the new one is open, and must not take the new one's listeners (or leave its own, which
// would delete the first chat too).
let endDeleteDialog = null;

function confirmDelete(item, session) {
  if (endDeleteDialog) endDeleteDialog();
  const dialog = $("delete-dialog");
  const opener = item.querySelector(".session-delete");
  $("delete-dialog-text").textContent = `“${session.name || "Untitled"}” and all its messages will be deleted.`;
  const confirm = $("delete-dialog-confirm");
  const cancel = $("delete-dialog-cancel");
  let deleted = false;
  const onConfirm = async () => {
    deleted = true;
    dialog.close();
    try {
      await api("DELETE", `/sessions/${session.id}`);
    } catch (error) {
      flash(`Delete failed: ${error.message}`);
    }
    if (session.id === state.sessionId) startNewChat();
    await reloadSessionsOrSay();
    $("new-session").focus();
  };
  const onCancel = () => dialog.close();
  const onKey = (event) => {
    if (event.key === "Escape") event.stopPropagation(); // the dialog closes itself; the drawer stays
  };
  const end = () => {
    confirm.removeEventListener("click", onConfirm);
    cancel.removeEventListener("click", onCancel);
    dialog.removeEventListener("keydown", onKey);
    if (endDeleteDialog === end) endDeleteDialog = null;
  };
  const onClose = () => {
    if (dialog.open) return; // a late `close` of an earlier opening
    dialog.removeEventListener("close", onClose);
    const current = endDeleteDialog === end;
    end();
    if (current && !deleted && opener.isConnected) opener.focus();
  };
  endDeleteDialog = end;
  confirm.addEventListener("click", onConfirm, { once: true });
  cancel.addEventListener("click", onCancel, { once: true });
  dialog.addEventListener("keydown", onKey);
  dialog.addEventListener("close", onClose);
  dialog.showModal();
  cancel.focus();
}

export function startNewChat() {
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

export async function openSession(id) {
  state.sessionId = id;
  state.view += 1;
  localStorage.setItem(LAST_SESSION_KEY, id);
  renderSessions();
  await showMessages(id);
}

// A chat made with "New chat" is named after its first message, as /chat names new sessions:
// the message this page sent first, or (a turn followed after a reload) a stored user
// message with nothing before it. Always the turn's own chat, whichever is on screen. The
// name is a convenience (the chat keeps "New chat" without it): a failure is only logged.
export async function nameAfterFirstMessage(sessionId, messages, sent) {
  const session = state.sessions.find((item) => item.id === sessionId);
  if (!session || session.name !== DEFAULT_SESSION_NAME) return;
  let text = sent && sent.firstTurn ? sent.text : null;
  const user = Array.isArray(messages) ? messages.find((message) => message.role === "user") : null;
  try {
    if (!text && !sent && user) {
      const before = await api("GET", `/sessions/${sessionId}/messages?limit=1&before=${user.id}`);
      if (before.messages.length === 0) text = user.content;
    }
    const name = String(text || "").split(/\s+/).join(" ").trim().slice(0, 60);
    if (name) await api("PATCH", `/sessions/${sessionId}`, { name });
  } catch (error) {
    console.error(`Could not name chat ${sessionId} after its first message:`, error);
  }
}

export function initSessions() {
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
}
