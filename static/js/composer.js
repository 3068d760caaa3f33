// The message box: Enter sends, Shift+Enter adds a line, images are attached with the
// picker or pasted (at most MAX_IMAGES). What sending does is send.js's business.
//
// Each attached image is previewed from an object URL, made once per file and freed
// (URL.revokeObjectURL) when the image is removed or the message is sent. The previews are not
// a live region: #attachments-status says each change once ("Image 2 attached").
//
// Send and Stop share one place under the box (`updateComposer`): Stop while the chat on
// screen has a turn running.

import { flash } from "/static/js/messages.js";
import { el } from "/static/js/render.js";
import { currentTurn } from "/static/js/state.js";

const $ = (id) => document.getElementById(id);
const MAX_IMAGES = 4;

const input = $("composer-input");
let attachments = [];
const previews = new Map(); // attached file -> its preview's object URL

function autoGrow() {
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
}

function addFiles(files) {
  for (const file of files) {
    if (!file.type.startsWith("image/")) continue;
    if (attachments.length >= MAX_IMAGES) {
      flash(`At most ${MAX_IMAGES} images per message.`);
      break;
    }
    attachments.push(file);
    announce(`Image ${attachments.length} attached (${attachments.length} of at most ${MAX_IMAGES}).`);
  }
  renderAttachments();
}

function announce(text) {
  $("attachments-status").textContent = text;
}

function previewUrl(file) {
  if (!previews.has(file)) previews.set(file, URL.createObjectURL(file));
  return previews.get(file);
}

// Free the previews of files no longer attached.
function freePreviews() {
  for (const [file, url] of previews) {
    if (attachments.includes(file)) continue;
    URL.revokeObjectURL(url);
    previews.delete(file);
  }
}

function renderAttachments() {
  const box = $("attachments");
  box.replaceChildren();
  freePreviews();
  attachments.forEach((file, index) => {
    const remove = el("button", { type: "button", class: "icon-button remove-attachment", "aria-label": `Remove image ${index + 1}`, text: "✕" });
    remove.addEventListener("click", () => {
      attachments.splice(index, 1);
      announce(`Image ${index + 1} removed.`);
      renderAttachments();
      input.focus();
    });
    box.append(el("div", { class: "attachment" }, el("img", { src: previewUrl(file), alt: `attached image ${index + 1}` }), remove));
  });
}

// Put a message that could not be sent back into the box (unless the user typed another).
export function restoreDraft(text, files) {
  if (!input.value.trim()) {
    input.value = text;
    autoGrow();
  }
  if (!attachments.length && files.length) {
    attachments = files.slice(0, MAX_IMAGES);
    renderAttachments();
  }
}

// While the chat on screen has a turn running, Send becomes Stop (the same place, so the
// keyboard focus moves with it).
export function updateComposer() {
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

// `canSend()` says whether a message may go now; `onSend(text, files)` sends it.
export function initComposer({ canSend, onSend }) {
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
    if (!canSend() || !text.trim()) return;
    const files = attachments.slice();
    input.value = "";
    autoGrow();
    attachments = [];
    renderAttachments(); // frees the previews: the message shows its own copies
    announce("");
    onSend(text, files);
  });

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
}
