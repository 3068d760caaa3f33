// Versions of a chat (SPEC 17): Regenerate under each answer, Edit on each user message, the
// version switcher ‹ 2/3 › on messages that have versions, and a failed turn's error with
// Retry that a reload still shows. The server keeps the tree; the list on screen is always
// the active branch (GET /sessions/<id>/messages), so after each change it is loaded again.
//
// messages.js draws a message and hands it here (`setMessageDecorator`, at start-up: this
// module imports turns.js, which imports messages.js); history.js calls `showBranchEnd` after
// a page of the branch is drawn.

import { api } from "/static/js/api.js";
import { flash, messageList, messageNode, scrollToEnd, setMessageDecorator, updateEmptyHint } from "/static/js/messages.js";
import { el } from "/static/js/render.js";
import { showMessages } from "/static/js/show_messages.js";
import { idle, loading, state } from "/static/js/state.js";
import { modelFailureTitle } from "/static/js/turn_errors.js";
import { runTurn, settleChatTurn, startTurn } from "/static/js/turns.js";

// A message's buttons: Edit (user), Regenerate (answer), the version switcher (any).
function decorate(node, message) {
  if (message.id === undefined || message.id === null || !state.sessionId) return;
  // One action bar per message: Copy's (message_actions.js) when it is there.
  const shared = node.querySelector(":scope > .message-actions");
  const bar = shared || el("div", { class: "message-actions" });
  if (message.versions && message.versions.count > 1) bar.prepend(switcher(message));
  if (message.role === "user") {
    const edit = el("button", { type: "button", class: "message-action version-edit", text: "Edit" });
    edit.setAttribute("aria-label", "Edit this message");
    edit.addEventListener("click", () => openEditor(node, message));
    bar.append(edit);
  } else if (message.role === "assistant") {
    const again = el("button", { type: "button", class: "message-action version-regenerate", text: "Regenerate" });
    again.setAttribute("aria-label", "Regenerate this answer");
    again.addEventListener("click", () => regenerate(message.id));
    bar.append(again);
  }
  if (!shared && bar.childElementCount) node.append(bar);
}

function switcher(message) {
  const { index, count, ids } = message.versions;
  const box = el("span", { class: "version-switcher", role: "group", "aria-label": "Versions" });
  const prev = el("button", { type: "button", class: "icon-button version-prev", "aria-label": "Previous version", text: "‹" });
  const next = el("button", { type: "button", class: "icon-button version-next", "aria-label": "Next version", text: "›" });
  prev.disabled = index <= 1;
  next.disabled = index >= count;
  const label = el("span", { class: "version-count", "aria-live": "polite" },
    el("span", { "aria-hidden": "true", text: `${index}/${count}` }),
    el("span", { class: "visually-hidden", text: `Version ${index} of ${count}` }));
  prev.addEventListener("click", () => showVersion(ids[index - 2], "prev"));
  next.addEventListener("click", () => showVersion(ids[index], "next"));
  box.append(prev, label, next);
  return box;
}

// Put the version that holds message `id` on screen; the focus stays on the switcher.
async function showVersion(id, direction) {
  if (id === undefined || !idle()) return;
  const sessionId = state.sessionId;
  try {
    await api("POST", `/sessions/${sessionId}/branch`, { message_id: id });
  } catch (error) {
    flash(`Could not show that version: ${error.message}`);
    return;
  }
  if (state.sessionId !== sessionId) return;
  await showMessages(sessionId, { redraw: true });
  const node = messageList().querySelector(`.message[data-id="${id}"]`);
  if (!node) return;
  const button = node.querySelector(direction === "prev" ? ".version-prev" : ".version-next");
  const target = button && !button.disabled ? button : node.querySelector(".version-switcher button:not([disabled])");
  if (target) target.focus();
}

// Everything after `node` in the list goes: the version being replaced.
function dropAfter(node) {
  while (node.nextSibling) node.nextSibling.remove();
}

// A turn of this chat whose POST is `post(turn)`; its messages come from the server when it
// ends (they carry their versions). A failure offers Retry: regenerate the user message.
async function versionTurn(userNode, userMessageId, post) {
  const sessionId = state.sessionId;
  const turn = startTurn({ sessionId, userNode });
  messageList().append(turn.progress.node);
  updateEmptyHint();
  scrollToEnd();
  const outcome = await runTurn(turn, () => post(turn));
  const sent = {
    text: "", files: [], firstTurn: false,
    resend: (again) => regenerate(again.userMessageId || userMessageId),
  };
  const redraw = Boolean(outcome && outcome.event === "done");
  if (redraw) loading(true); // busy from the turn's end until its branch is drawn again
  try {
    await settleChatTurn(turn, outcome, sent);
    if (redraw && state.sessionId === sessionId) await showMessages(sessionId, { redraw: true });
  } finally {
    if (redraw) loading(false);
  }
}

// A new answer to the user message of `messageId` (an answer's id, or the user message's).
export async function regenerate(messageId) {
  if (!idle() || !state.sessionId) return;
  const sessionId = state.sessionId;
  const anchor = messageList().querySelector(`.message[data-id="${messageId}"]`);
  let userNode = anchor;
  while (userNode && !userNode.classList.contains("role-user")) userNode = userNode.previousElementSibling;
  if (userNode) dropAfter(userNode);
  else messageList().querySelectorAll(".turn-error").forEach((node) => node.remove());
  await versionTurn(null, messageId, (turn) => turn.post(`/sessions/${sessionId}/regenerate`, { message_id: messageId }));
}

// Edit in place: a textarea with Save & send and Cancel (Escape cancels).
function openEditor(node, message) {
  if (!idle() || node.querySelector(".version-editor")) return;
  const bubble = node.querySelector(".bubble");
  const bar = node.querySelector(".message-actions");
  const fieldId = `edit-${message.id}`;
  const area = el("textarea", { id: fieldId, class: "version-textarea", rows: "3" });
  area.value = message.content;
  const save = el("button", { type: "submit", class: "primary", text: "Save & send" });
  const cancel = el("button", { type: "button", text: "Cancel" });
  const form = el("form", { class: "version-editor", "aria-label": "Edit message" },
    el("label", { for: fieldId, class: "visually-hidden", text: "Edit your message" }), area,
    el("div", { class: "row" }, save, cancel));
  const close = () => {
    form.remove();
    bubble.hidden = false;
    if (bar) bar.hidden = false;
    const edit = node.querySelector(".version-edit");
    if (edit) edit.focus();
  };
  cancel.addEventListener("click", close);
  form.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      close();
    } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = area.value.trim();
    if (!text || !idle()) return;
    sendEdit(node, message, text);
  });
  bubble.hidden = true;
  if (bar) bar.hidden = true;
  bubble.after(form);
  area.focus();
}

async function sendEdit(node, message, text) {
  const sessionId = state.sessionId;
  const pending = messageNode({ role: "user", content: text });
  pending.classList.add("pending");
  node.replaceWith(pending);
  dropAfter(pending);
  await versionTurn(pending, null, (turn) => turn.post("/chat", { message: text, session_id: sessionId, edit_of: message.id }));
}

// After a page of the branch is drawn: a branch that ends without an answer (the turn failed,
// or its server died: `turn_lost`) says so, with Retry. `running`: a turn of this chat is on.
export function showBranchEnd(messages, running) {
  if (running || !messages.length) return;
  let userIndex = -1;
  for (let i = messages.length - 1; i >= 0; i -= 1) if (messages[i].role === "user") { userIndex = i; break; }
  if (userIndex < 0) return;
  const user = messages[userIndex];
  const after = messages.slice(userIndex + 1);
  const failure = user.meta && user.meta.turn_error;
  const unanswered = after.length === 0 || (failure && !after.some((message) => message.role === "assistant"));
  if (!unanswered) return;
  let title = "This message has no answer.";
  let detail = "The turn ended without one (it was stopped, or the server stopped). Retry asks again.";
  if (failure) {
    title = failure.code === "provider_unavailable" ? modelFailureTitle(failure) : `The reply failed (${failure.code}). Your message was kept.`;
    detail = failure.message;
  }
  const node = el("div", { class: "notice notice-error turn-error branch-error" },
    el("strong", { text: title }), el("p", { class: "muted", text: detail }));
  const retry = el("button", { type: "button", class: "primary retry-button", text: "Retry" });
  retry.addEventListener("click", () => {
    if (!idle()) return;
    node.remove();
    regenerate(user.id);
  });
  node.append(retry);
  messageList().append(node);
}

export function initVersions() {
  setMessageDecorator(decorate);
}
