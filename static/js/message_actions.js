// The actions under a stored user or assistant message: Copy (its Markdown source, the stored
// content, not the rendered text). Other actions (regenerate, edit) join the same bar.

import { copyText, el } from "/static/js/render.js";

export function messageActions(message) {
  const who = message.role === "user" ? "your message" : "the answer";
  const copy = el("button", {
    type: "button",
    class: "message-action copy-message",
    "aria-label": `Copy ${who} as Markdown`,
    title: "Copy as Markdown",
    text: "Copy",
  });
  copy.addEventListener("click", () => copyText(message.content, copy));
  return el("div", { class: "message-actions" }, copy);
}
