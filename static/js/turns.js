// Turns of the chat page: what a LiveTurn (live.js) asks of the page (`host`), following a turn
// this page did not start, and where a finished turn's messages go: into its own chat, if that
// is on screen. Sending a message is send.js; answering a widget is answer.js.

import { restoreDraft, updateComposer } from "/static/js/composer.js";
import { LiveTurn } from "/static/js/live.js";
import { flash, isPinned, messageList, scrollToEnd, updateEmptyHint } from "/static/js/messages.js";
import { el } from "/static/js/render.js";
import { nameAfterFirstMessage, refreshSessions } from "/static/js/sessions.js";
import { showMessages } from "/static/js/show_messages.js";
import { LAST_SESSION_KEY, currentTurn, liveTurnFor, onScreen, state } from "/static/js/state.js";
import { turnErrorNode } from "/static/js/turn_errors.js";

const $ = (id) => document.getElementById(id);

// What a LiveTurn asks of the page.
export const host = {
  onScreen,
  // The first turn of a new chat created it: that chat is now the one on screen.
  sessionKnown(turn) {
    if (state.sessionId === null && state.view === turn.view) {
      state.sessionId = turn.sessionId;
      localStorage.setItem(LAST_SESSION_KEY, turn.sessionId);
    }
    refreshSessions();
  },
  // replay.gap: some events were lost, so the messages come from the server again.
  reload(turn) {
    if (onScreen(turn) && turn.sessionId) showMessages(turn.sessionId, { redraw: true });
  },
  changed() {
    updateComposer();
  },
  notice(turn, text) {
    if (onScreen(turn)) flash(text);
  },
};

// A turn of the chat on screen (`sessionId`, or the new chat of `state.view`), counted as live.
export function startTurn({ sessionId = state.sessionId, turnId = null, userNode = null } = {}) {
  const turn = new LiveTurn({ sessionId, turnId, view: state.view, host, userNode });
  state.turns.add(turn);
  return turn;
}

// Follow a turn this page did not start (a reload, another tab, a busy chat).
export function followTurn(sessionId, turnId) {
  const turn = startTurn({ sessionId, turnId });
  runTurn(turn, () => turn.follow()).then((outcome) => settleChatTurn(turn, outcome, null));
  return turn;
}

// Run a turn to its end; the page stops counting it as live before anything is drawn.
export async function runTurn(turn, start) {
  updateComposer();
  let outcome = null;
  try {
    outcome = await start();
  } finally {
    state.turns.delete(turn);
    updateComposer();
  }
  // A page load under way may not hold this turn's messages: let it land first (it reports
  // its own failures, so one here is a bug: logged, and the turn is still drawn).
  if (state.pageLoad) {
    await state.pageLoad.catch((error) => console.error("The message list failed while a turn ended:", error));
  }
  return outcome;
}

// A chat turn ended: its stored messages replace the live ones if its chat is on screen
// (else they come from the server when the chat is opened again). `sent`: {text, files,
// firstTurn, resend} when this page sent the message (then a failure offers Retry).
export async function settleChatTurn(turn, outcome, sent) {
  if (!outcome) return turn.end("failed"); // the page let go of it (signed out)
  const data = outcome.data || {};
  const shown = onScreen(turn);
  switch (outcome.event) {
    case "done": {
      const stopped = Boolean(data.stopped);
      turn.end(stopped ? "stopped" : "done");
      if (Array.isArray(data.messages) && data.messages.some((message) => message.role === "assistant")) {
        document.dispatchEvent(new CustomEvent("model-answered")); // status.js: the banner goes
      }
      if (!onScreen(turn)) {
        // nothing to draw: the messages come from the server when the chat is opened
      } else if (!Array.isArray(data.messages)) {
        await showMessages(turn.sessionId, { redraw: true });
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
      if (shown) await showMessages(turn.sessionId, { redraw: true });
      break;
    case "refused":
      refused(turn, outcome.error, sent);
      break;
    default:
      turn.end("failed");
      if (shown) {
        turn.dropAnswer();
        messageList().append(turnErrorNode(data, sent, turn));
      }
  }
  if (onScreen(turn)) {
    updateEmptyHint();
    if (isPinned() || outcome.event !== "done") scrollToEnd();
  }
  await refreshSessions();
}

// POST /chat was turned down before a turn ran (nothing was stored).
function refused(turn, error, sent) {
  const shown = onScreen(turn);
  if (error.code === "turn_in_progress" && turn.sessionId) {
    // Another turn of this chat is running (another tab): show it; the message goes back
    // to the composer.
    turn.progress.node.remove();
    if (turn.userNode) turn.userNode.remove();
    if (sent && shown) restoreDraft(sent.text, sent.files);
    if (shown) {
      // no role: the message list is the live region that announces it (once)
      messageList().append(el("p", { class: "notice", text: "This chat is still answering an earlier message; your message is back in the box." }));
    }
    const running = error.body && error.body.turn_id;
    if (!liveTurnFor(turn.sessionId) && running) {
      const follower = followTurn(turn.sessionId, running);
      if (shown) follower.attach(messageList());
    }
    return;
  }
  turn.end("failed");
  if (shown) messageList().append(turnErrorNode({ ...error.body, error: { code: error.code, message: error.message } }, sent, turn));
}

// The page lets go of every turn it follows (signing out); the turns go on on the server.
export function closeTurns() {
  for (const turn of state.turns) turn.close();
  state.turns.clear();
}

export function initTurns() {
  $("stop-button").addEventListener("click", () => {
    const turn = currentTurn();
    if (turn && !turn.stopping) turn.requestCancel();
  });
}
