// `showMessages(id)`: fill the message list with a chat's messages, for every module that needs
// it (opening a chat, a turn whose messages come from the server again). history.js does the
// work and imports sessions.js and turns.js, which call it in turn: so it is handed over here
// at start-up (`initHistory`), and the chat modules' imports go one way, with no cycle
// (tests/ui/test_js_modules.py).

let show = null;

// history.js's showMessages, once the page starts.
export function setShowMessages(fn) {
  show = fn;
}

// Returns the load (a promise that never rejects: it says its own failures). `redraw: true`
// when the chat on screen is drawn again: it stays visible until its fresh copy arrives.
export function showMessages(id, options = {}) {
  if (!show) throw new Error("showMessages was called before initHistory()");
  return show(id, options);
}
