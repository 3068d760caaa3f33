// Answering an interactive widget (widgets.js): POST the answer to /api/ai/tool-result and show
// the continuation like a chat turn; a refusal is said next to the widget.

import { messageList, scrollToEnd, updateEmptyHint } from "/static/js/messages.js";
import { refreshSessions } from "/static/js/sessions.js";
import { showMessages } from "/static/js/show_messages.js";
import { idle, liveTurnFor, onScreen, state } from "/static/js/state.js";
import { answerSavedErrorNode } from "/static/js/turn_errors.js";
import { followTurn, runTurn, startTurn } from "/static/js/turns.js";
import { isWidgetAnswer, widgetFor } from "/static/js/widgets.js";

const $ = (id) => document.getElementById(id);

// The server refused the answer before any turn ran: say why next to the widget.
function answerRefused(widget, turn, refusal) {
  widget.busy(false);
  // the server's message is written for people; its code (PROFILE_UPDATE_FAILED…) is not shown
  const message = refusal.message || "the answer could not be sent";
  if (refusal.code === "turn_in_progress") {
    widget.error("This chat is still answering; answer again when it is done.");
    const running = refusal.body && refusal.body.turn_id;
    if (running && !liveTurnFor(turn.sessionId)) followTurn(turn.sessionId, running).attach(messageList());
  } else if (refusal.code === "approval_expired") {
    widget.closed(message); // the chat went on past it: nothing ran
  } else if (refusal.status === 409) {
    widget.answered(null, false);
    widget.error(message);
  } else if (refusal.status === 404) {
    widget.closed(message);
  } else {
    // 400 (the value does not fit), 422 PROFILE_UPDATE_FAILED, 500 TOOL_EXECUTION_FAILED,
    // or the network: the question is still open, the user can answer again.
    widget.error(message);
    widget.focus();
  }
  scrollToEnd();
}

export async function answerWidget(widget, value, inputMethod) {
  if (!idle()) {
    widget.error("Wait until the current answer has arrived, then try again.");
    return;
  }
  const callId = widget.message.meta.tool_call_id;
  const turn = startTurn({ sessionId: state.sessionId });
  widget.busy(true);
  messageList().append(turn.progress.node);
  scrollToEnd();
  const outcome = await runTurn(turn, () => turn.post("/api/ai/tool-result", widget.body(value, inputMethod)));
  if (!outcome) return turn.end("failed");
  const shown = onScreen(turn);
  widget = widgetFor(callId) || widget; // the chat may have been drawn again meanwhile

  if (outcome.event === "refused") {
    turn.progress.node.remove();
    if (shown) answerRefused(widget, turn, outcome.error);
    return;
  }

  const data = outcome.data || {};
  const done = outcome.event === "done";
  turn.end(done ? (data.stopped ? "stopped" : "done") : "failed");
  if (shown) {
    widget.busy(false);
    if (done) {
      const stored = data.messages || [];
      const result = stored.find((message) => isWidgetAnswer(message));
      widget.answered(result && result.meta && result.meta.output ? result.meta.output.value : value);
      const asked = turn.showStored(stored);
      if (!asked) $("composer-input").focus();
    } else if (outcome.event === "gone") {
      await showMessages(turn.sessionId, { redraw: true });
    } else {
      // The answer was saved; only the model's next pass failed.
      widget.answered(value);
      turn.dropAnswer();
      messageList().append(answerSavedErrorNode(data));
    }
    updateEmptyHint();
    scrollToEnd();
  }
  await refreshSessions();
}
