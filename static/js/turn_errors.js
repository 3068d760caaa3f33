// How a failed turn is said in the chat: what failed, whether the message was kept, and (for a
// message this page sent, when the failure may pass) a Retry button. These notices have no
// live-region role of their own: the message list (role=log) announces each one once.

import { el } from "/static/js/render.js";
import { idle, state } from "/static/js/state.js";

// Failures worth sending the same message again for.
const RETRYABLE = new Set(["provider_unavailable", "storage_unavailable", "network_error", "stream_closed", "rate_limited"]);

// What happened to the model, in the user's words, by the error's `details.reason` (llm/hints.py).
const MODEL_WORDS = {
  not_answering: "The model is not answering.",
  overloaded: "The model is overloaded.",
  refused: "The model refused the request.",
  unreachable: "The model cannot be reached.",
};

// The headline of a provider_unavailable failure (also for a failure read back after a reload);
// the error's message, under it, says that the message was kept and when to try again.
export function modelFailureTitle(error) {
  const reason = error && error.details && error.details.reason;
  return MODEL_WORDS[reason] || "The model did not answer. Your message was kept.";
}

// `data`: the turn's `error` event ({error: {code, message}, session_id?, user_message_id?});
// `sent`: {text, files, firstTurn, resend(retry)} when this page sent the message, else null.
export function turnErrorNode(data, sent, turn) {
  const error = data.error || {};
  if (error.code === "provider_unavailable") document.dispatchEvent(new CustomEvent("provider-unavailable")); // status.js
  const node = el("div", { class: "notice notice-error turn-error", "data-reason": (error.details && error.details.reason) || error.code || "" });
  const kept = data.user_message_id !== undefined || error.code === "provider_unavailable";
  let explanation;
  if (!sent) explanation = `The reply failed (${error.code || "error"}).`;
  else if (error.code === "provider_unavailable") explanation = modelFailureTitle(error);
  else if (kept) explanation = `The reply failed (${error.code || "error"}). Your message was kept.`;
  else explanation = `The message could not be sent (${error.code || "error"}).`;
  node.append(el("strong", { text: explanation }), el("p", { class: "muted", text: error.message || "" }));
  if (sent && RETRYABLE.has(error.code)) {
    const retry = el("button", { type: "button", class: "primary retry-button", text: "Retry" });
    retry.addEventListener("click", () => {
      if (!idle()) return;
      node.remove();
      sent.resend({
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

// The answer to a widget was stored, but the model's next pass failed.
export function answerSavedErrorNode(data) {
  const error = data.error || {};
  return el("div", { class: "notice notice-error turn-error" },
    el("strong", { text: `Your answer was saved, but the reply failed (${error.code || "error"}).` }),
    el("p", { class: "muted", text: `${error.message || ""} Send a message to go on.`.trim() }));
}
