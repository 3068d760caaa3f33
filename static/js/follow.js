// Following the answer: the message list stays at its bottom while anything is added to it
// (an answer being written, progress steps, a stored turn, an image that loads), unless the
// user scrolled up; then "Jump to latest" shows, and following resumes when it is clicked or
// the user scrolls back down to the bottom.
//
// Why a state and not a measure: the list used to ask "is the view at the bottom?" before each
// change (keepPinned). Any change made outside that question (the answer's first, empty
// bubble, a finished step's badge, a folded progress box, an image) left the view a little
// above the bottom; in a chat taller than the window that made every later check say "the
// user scrolled up", and the view stayed put while the answer grew below it. Here only the
// user's own scrolling stops following, and a ResizeObserver keeps the view down after any
// change of the list's height, whoever made it.

const $ = (id) => document.getElementById(id);
const BOTTOM_PX = 48; // "at the bottom" leaves this much slack

const follow = { on: true, lastTop: 0, started: false };

function box() {
  return $("messages");
}

function gap() {
  const b = box();
  return b.scrollHeight - b.scrollTop - b.clientHeight;
}

function showJump() {
  const jump = $("jump-latest");
  if (!jump) return;
  const hide = follow.on || gap() <= BOTTOM_PX;
  if (hide && jump.contains(document.activeElement)) box().focus({ preventScroll: true });
  jump.hidden = hide;
  if (!hide) jump.style.bottom = `${$("composer").offsetHeight + 12}px`; // above the composer, however tall
}

// Whether new content keeps the view at the bottom.
export function following() {
  return follow.on;
}

// Go to the bottom and follow from now on (sending a message, opening a chat, Jump to latest).
export function followEnd() {
  const b = box();
  follow.on = true;
  b.scrollTop = b.scrollHeight;
  follow.lastTop = b.scrollTop;
  showJump();
}

// Stop following (the page shows one message, e.g. a search result, somewhere up the list).
export function stopFollowing() {
  follow.on = false;
  follow.lastTop = box().scrollTop;
  showJump();
}

function onScroll() {
  const b = box();
  const top = b.scrollTop;
  if (gap() <= BOTTOM_PX) follow.on = true; // the user came back down (or the list shrank)
  else if (top < follow.lastTop) follow.on = false; // the user went up
  follow.lastTop = top;
  showJump();
}

function onResize() {
  if (follow.on) {
    const b = box();
    b.scrollTop = b.scrollHeight;
    follow.lastTop = b.scrollTop;
  }
  showJump();
}

export function initFollow() {
  if (follow.started) return;
  follow.started = true;
  box().addEventListener("scroll", onScroll, { passive: true });
  // Both the list (answers growing) and the scroll box (the window or the composer resizing).
  const observer = new ResizeObserver(onResize);
  observer.observe($("message-list"));
  observer.observe(box());
  $("jump-latest").addEventListener("click", () => {
    followEnd();
    box().focus({ preventScroll: true });
  });
}
