// Stored messages -> DOM nodes, and the message list's scrolling. Shared by the chat
// (history.js, turns.js) and the live turn (live.js); nothing here knows which chat is on screen.

import { followEnd, following } from "/static/js/follow.js";
import { messageActions } from "/static/js/message_actions.js";
import { badge, el, renderMarkdown } from "/static/js/render.js";
import { renderToolMessage } from "/static/js/toolblocks.js";
import {
  isApprovalResult, isWidgetAnswer, isWidgetCall, noteApproval, renderAnswer, renderWidget, widgetFor,
} from "/static/js/widgets.js";

const $ = (id) => document.getElementById(id);

let onWidgetAnswer = () => {};
let decorateMessage = () => {}; // versions.js: Edit, Regenerate, the version switcher

// versions.js adds its buttons to each stored message drawn (handed over at start-up).
export function setMessageDecorator(decorate) {
  decorateMessage = decorate;
}

// app.js says what answering a widget does (answer.js posts the answer as a new turn).
export function setWidgetHandler(handler) {
  onWidgetAnswer = handler;
}

export function messageList() {
  return $("message-list");
}

export function messageNode(message) {
  const role = message.role || "";
  const node = el("article", { class: `message role-${role.endsWith("_tools") ? "tool" : role}`, "data-id": message.id });
  if (role.endsWith("_tools") && isWidgetCall(message)) {
    node.className = "message role-widget";
    node.append(renderWidget(message, (...args) => onWidgetAnswer(...args)));
  } else if (role.endsWith("_tools") && isWidgetAnswer(message)) {
    node.className = "message role-answer";
    node.append(renderAnswer(message));
  } else if (role.endsWith("_tools")) {
    if (isApprovalResult(message)) noteApproval(message);
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
    if (message.meta && message.meta.stopped) node.append(stoppedNote());
    const by = answeredBy(message);
    if (by) node.append(by);
  }
  if ((role === "user" || role === "assistant") && message.id !== undefined) node.append(messageActions(message));
  decorateMessage(node, message);
  return node;
}

// Which model wrote an answer, and when: a muted line under it, from `meta.answered_by`
// ({provider, model}, set when the answer is stored) and the message's `created_at`.
function answeredBy(message) {
  const by = message.meta && message.meta.answered_by;
  const when = message.created_at ? new Date(message.created_at) : null;
  const known = when && !Number.isNaN(when.getTime());
  if (!by && !known) return null;
  const line = el("p", { class: "answered-by muted", "data-testid": "answered-by" });
  if (by) line.append(el("span", { class: "answered-model", text: `${by.model} (${by.provider})` }));
  if (by && known) line.append(" · ");
  if (known) {
    const time = when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    line.append(el("time", { datetime: message.created_at, title: when.toLocaleString(), text: time }));
  }
  return line;
}

// An answer the user stopped (SPEC 7a.5: stored with meta.stopped) says so under its text.
function stoppedNote() {
  const note = el("p", { class: "stopped-note muted" }, badge(false, "stopped"));
  note.querySelector(".badge").className = "badge badge-warn";
  note.append(" You stopped this answer here.");
  return note;
}

// A page of stored messages as the chat shows it. A user message that got no reply and was
// sent again as a new message (not through Retry, which answers the stored row again) shows
// once, as the later copy.
export function visibleMessages(messages) {
  return messages.filter((message, index) => {
    const next = messages[index + 1];
    return !(message.role === "user" && next && next.role === "user" && sameUserMessage(message, next));
  });
}

function sameUserMessage(a, b) {
  const images = (message) => ((message.meta && message.meta.images) || []).length;
  return a.content === b.content && images(a) === images(b);
}

export function hasMessage(id) {
  return id !== undefined && id !== null && Boolean(messageList().querySelector(`.message[data-id="${CSS.escape(String(id))}"]`));
}

// The stored messages of a finished turn, put where `before` is (or at the end), skipping
// any already on screen; a widget that asks the user something gets the focus.
export function showTurnMessages(messages, before = null) {
  let asked = null;
  const list = messageList();
  for (const message of messages) {
    if (hasMessage(message.id)) continue;
    const node = messageNode(message);
    if (before && before.parentNode === list) list.insertBefore(node, before);
    else list.append(node);
    if (isWidgetCall(message) && message.meta.status === "pending") asked = widgetFor(message.meta.tool_call_id);
  }
  if (asked) setTimeout(() => asked.focus(), 0);
  updateEmptyHint();
  return asked;
}

export function updateEmptyHint() {
  $("empty-hint").hidden = messageList().childElementCount > 0;
}

// Whether the view follows the end of the conversation (follow.js decides).
export function isPinned() {
  return following();
}

export function scrollToEnd() {
  followEnd();
}

// Run `change` (which adds to the list) and follow it down only if the view follows the end
// (follow.js also keeps it there when the list grows later, e.g. an image that loads).
export function keepPinned(change) {
  const result = change();
  if (following()) followEnd();
  return result;
}

// An error said in the chat. No role of its own: the message list (role=log) is the live
// region that announces it, once (an alert inside the log was read twice).
export function flash(text) {
  messageList().append(el("div", { class: "notice notice-error", text }));
  updateEmptyHint();
  scrollToEnd();
}
