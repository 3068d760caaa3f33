// The chat page's one state object: which chat is on screen, the message-list load under way,
// and the turns this page follows. Every chat module (sessions.js, history.js, turns.js,
// send.js, answer.js, login.js) reads and writes it here, so "which chat is on screen" has
// one definition (`onScreen`).

export const LAST_SESSION_KEY = "orchestrator.lastSession"; // kept in localStorage (with settings.js's theme)

const $ = (id) => document.getElementById(id);

export const state = {
  user: null,
  sessions: [],
  sessionId: null, // the chat on screen (null: a new chat not created yet)
  view: 0, // bumped whenever another chat is put on screen
  page: 0, // bumped by each load of the message list; only the newest may fill it
  pageLoad: null, // that load, while it runs
  oldestId: null,
  loads: 0,
  turns: new Set(), // every LiveTurn this page follows, in any chat
};

// While a session's messages load, sending waits (a late page would wipe the new turn) and
// #app-view says aria-busy.
export function loading(on) {
  state.loads += on ? 1 : -1;
  $("app-view").setAttribute("aria-busy", String(state.loads > 0));
}

// A turn draws only while its chat is on screen (a new chat's first turn: while its view is).
export function onScreen(turn) {
  return turn.sessionId ? turn.sessionId === state.sessionId : turn.view === state.view;
}

// The turn running in the chat on screen, if any.
export function currentTurn() {
  for (const turn of state.turns) if (onScreen(turn)) return turn;
  return null;
}

export function liveTurnFor(sessionId) {
  for (const turn of state.turns) if (turn.sessionId === sessionId) return turn;
  return null;
}

// Whether the user may start something in the chat on screen (no turn running, no page loading).
export function idle() {
  return !currentTurn() && state.loads === 0;
}
