// Is the model there? Is the code runner ready? Said before the user sends, not after.
//
// `GET /api/status` answers from probes the server already caches (SPEC 4's /health would
// write-probe the database on each call): whether some provider of the chain answers, and the
// judge's state. The page asks on sign-in, every 15 s while the model answers (so a failed probe
// shows soon; the answer is cached on the server), every 10 s while it does not (to see it come
// back), when the window gets the focus again, right after a turn failed with
// provider_unavailable (turn_errors.js sends a `provider-unavailable` event) and right after a
// turn got its answer while the banner shows (turns.js sends `model-answered`): the server counts
// a turn's calls as evidence fresher than its probe, so the banner comes with the failed turn
// and goes with the first answer. The asks after a failure, on focus and while down carry
// `recheck=1`: the server probes again if its probe is older than PROVIDER_RECHECK_S, once for
// all pages. While no model answers, a banner (role=status, not
// blocking: the composer stays usable) says what is wrong and that messages are kept; it goes
// when the model answers again. While the judge's images are being built, the Code and
// Problems panels say that the code runner is being prepared.

import { api, ApiError } from "/static/js/api.js";
import { el } from "/static/js/render.js";

const $ = (id) => document.getElementById(id);
const EVERY_MS_UP = 15_000;
const EVERY_MS_DOWN = 10_000;

const watch = { timer: null, down: false, asking: false, again: false, againRecheck: false };

function banner() {
  let node = $("model-banner");
  if (!node) {
    // role=status: announced politely once, never stealing the focus; it stays in the page
    // (hidden while the model answers) so that its text changes are what is announced
    node = el("div", { id: "model-banner", class: "model-banner", role: "status" });
    const chat = document.querySelector("main.chat");
    chat.prepend(node);
  }
  return node;
}

function showModel(model) {
  const node = banner();
  watch.down = !model.ok;
  if (model.ok) {
    node.replaceChildren();
    node.hidden = true;
    return;
  }
  const check = el("button", { type: "button", class: "link-button", text: "Check again" });
  check.addEventListener("click", () => checkStatus({ recheck: true }));
  node.replaceChildren(
    el("strong", { text: "The model is not answering right now." }),
    el("span", { text: ` ${model.message} You can keep writing: messages you send are kept, and the answer can be retried once the model is back. ` }),
    check,
  );
  node.hidden = false;
}

function judgeNotice(panelId, state, message) {
  const id = `${panelId}-runner-state`;
  let node = $(id);
  if (state !== "preparing") {
    if (node) node.remove();
    return;
  }
  if (!node) {
    node = el("p", { id, class: "notice runner-preparing", role: "status" });
    $(panelId).prepend(node);
  }
  node.replaceChildren(el("strong", { text: "The code runner is being prepared…" }), ` ${message}`);
}

function showJudge(judge) {
  judgeNotice("code-panel", judge.state, "Its images are being built (the first time takes a few minutes); Run works once it is ready.");
  judgeNotice("problems-panel", judge.state, "Its images are being built; problems can be generated and checked once it is ready.");
}

function schedule() {
  clearTimeout(watch.timer);
  watch.timer = setTimeout(() => checkStatus({ recheck: watch.down }), watch.down ? EVERY_MS_DOWN : EVERY_MS_UP);
}

// One ask at a time; an ask made meanwhile runs once the current one is answered.
export async function checkStatus({ recheck = false } = {}) {
  if (watch.asking) {
    watch.again = true;
    watch.againRecheck = watch.againRecheck || recheck;
    return;
  }
  watch.asking = true;
  try {
    if ($("app-view").hidden) return; // signed out: nothing to ask (the API would answer 401)
    const status = await api("GET", `/api/status${recheck ? "?recheck=1" : ""}`);
    showModel(status.model);
    showJudge(status.judge);
  } catch (error) {
    if (!(error instanceof ApiError)) {
      // the server itself did not answer: say so the same way (messages are not sent then)
      showModel({ ok: false, message: "This server does not answer either." });
    }
  } finally {
    watch.asking = false;
    schedule();
    if (watch.again) {
      const again = { recheck: watch.againRecheck };
      watch.again = false;
      watch.againRecheck = false;
      checkStatus(again);
    }
  }
}

export function initStatus() {
  // signing in shows #app-view: ask then (and not while the login form is on screen)
  new MutationObserver(() => {
    if (!$("app-view").hidden) checkStatus({ recheck: true });
  }).observe($("app-view"), { attributes: true, attributeFilter: ["hidden"] });
  window.addEventListener("focus", () => checkStatus({ recheck: true }));
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") checkStatus({ recheck: true });
  });
  document.addEventListener("provider-unavailable", () => checkStatus({ recheck: true }));
  document.addEventListener("model-answered", () => {
    if (watch.down) checkStatus();
  });
}
