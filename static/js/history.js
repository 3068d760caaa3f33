// The message list of the chat on screen: its newest page, "Load older messages", and picking
// up the chat's turn in progress (turns.js follows it).

import { api } from "/static/js/api.js";
import { updateComposer } from "/static/js/composer.js";
import { flash, hasMessage, messageList, messageNode, scrollToEnd, updateEmptyHint, visibleMessages } from "/static/js/messages.js";
import { refreshSessions, startNewChat } from "/static/js/sessions.js";
import { setShowMessages } from "/static/js/show_messages.js";
import { liveTurnFor, loading, state } from "/static/js/state.js";
import { followTurn } from "/static/js/turns.js";
import { showBranchEnd } from "/static/js/versions.js";
import { resetWidgets } from "/static/js/widgets.js";

const $ = (id) => document.getElementById(id);
const PAGE_SIZE = 50;

// Fill the list with the chat's newest page of messages, then its turn in progress: the one
// this page follows already, or (after a reload, or a turn started elsewhere) the session's
// `active_turn`, which is then followed from its first event. Other modules call it through
// show_messages.js.
function showMessages(id, { redraw = false } = {}) {
  const token = (state.page += 1);
  // Another chat: its messages go at once. The chat on screen drawn again (after a version
  // turn, a replay gap): what is shown stays until the server's copy replaces it, never blank.
  if (!redraw || state.sessionId !== id) messageList().replaceChildren();
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
      showBranchEnd(page.messages, Boolean(turn)); // a turn that failed, even before a reload: Retry
    } catch (error) {
      if (state.page !== token) return;
      if (error.status === 404) {
        startNewChat();
        await refreshSessions(); // logs its own failure: this load never rejects
        return;
      }
      flash(`Could not load messages: ${error.message}`);
    } finally {
      loading(false);
    }
    if (state.page !== token) return;
    updateEmptyHint();
    updateComposer();
    scrollToEnd(); // reads the height: the page's layout is done here
    performance.mark("messages-shown", { detail: { count: messageList().childElementCount } }); // bench/ui.py
  })();
  state.pageLoad = load;
  return load;
}

// The page before the oldest message shown, put above it (messages already shown are skipped).
// Answers whether older messages remain (search results load pages until their message shows).
export async function loadOlder() {
  if (!state.sessionId || state.oldestId === null) return false;
  const sessionId = state.sessionId;
  let page;
  try {
    page = await api("GET", `/sessions/${sessionId}/messages?limit=${PAGE_SIZE}&before=${state.oldestId}`);
  } catch (error) {
    flash(`Could not load older messages: ${error.message}`);
    return false;
  }
  if (state.sessionId !== sessionId) return false; // another chat was opened meanwhile
  const list = messageList();
  const first = list.firstChild;
  for (const message of visibleMessages(page.messages)) {
    if (!hasMessage(message.id)) list.insertBefore(messageNode(message), first);
  }
  if (page.messages.length) state.oldestId = page.messages[0].id;
  $("load-older").hidden = !page.has_more;
  return page.has_more;
}

export function initHistory() {
  setShowMessages(showMessages);
  $("load-older").addEventListener("click", loadOlder);
}
