// Sending a message from the composer to the chat on screen (`POST /chat`), and sending it
// again from a failed turn's Retry button (the same bubble, the stored message answered again).

import { messageList, messageNode, scrollToEnd, updateEmptyHint } from "/static/js/messages.js";
import { el } from "/static/js/render.js";
import { state } from "/static/js/state.js";
import { runTurn, settleChatTurn, startTurn } from "/static/js/turns.js";

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

// An image of a message being sent, shown from the file itself. Its object URL is freed as
// soon as the image is decoded (or failed to): the element keeps showing it, and the bubble
// is replaced by the stored message, whose images come from the server.
function previewImage(file) {
  const url = URL.createObjectURL(file);
  const image = el("img", { src: url, alt: "uploaded image" });
  const free = () => URL.revokeObjectURL(url);
  image.addEventListener("load", free, { once: true });
  image.addEventListener("error", free, { once: true });
  return image;
}

function pendingUserNode(text, files) {
  const node = messageNode({ role: "user", content: text });
  node.classList.add("pending");
  if (files.length) {
    const strip = el("div", { class: "image-strip" });
    for (const file of files) strip.append(previewImage(file));
    node.append(strip);
  }
  return node;
}

// Send a message to the chat on screen. `retry`: the failed turn whose message this sends
// again; its bubble is reused, so the message shows once.
export async function send(text, files, retry = null) {
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
  const turn = startTurn({ sessionId, userNode });
  list.append(turn.progress.node);
  updateEmptyHint();
  scrollToEnd();
  const retryOf = retry ? retry.userMessageId : null;
  const outcome = await runTurn(turn, () => turn.post("/chat", sendBody(text, files, sessionId, retryOf)));
  const resend = (again) => send(text, files, again);
  await settleChatTurn(turn, outcome, { text, files, firstTurn, resend });
}
