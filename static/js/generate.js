// Generating a practice activity (SPEC section 9): `POST /activities/generate` answers 202
// with the job's session and turn; its progress streams on that session's
// `/generate/stream` as `job.started`, `problem.started`, `problem.rejected`,
// `problem.stored`, `problem.failed`, and ends with `done` (`{status, problems}`) or `error`.
// The panel shows one line per problem (with the reason of each of its rejected drafts under
// it) and a meter; the status line (role=status) says each change once. Stop cancels the
// job's turn (POST /sessions/<id>/cancel): the job keeps what it stored and ends with a
// `done` whose `stopped` is true. A refusal (no judge, rate limit, bad topic) is said in words, with its code.

import { ApiError, api, cancelTurn, followTurn } from "/static/js/api.js";
import { listActivities } from "/static/js/panels.js";
import { el } from "/static/js/render.js";

const $ = (id) => document.getElementById(id);
const MAX_FOLLOWS = 5; // reconnections of the progress stream before giving up on it

const REJECTIONS = {
  provider_unavailable: "the model did not answer",
  invalid_json: "the model's draft was not valid JSON",
  invalid_fields: "the draft had missing or invalid fields",
  invalid_tests: "the draft's tests could not run",
  reference_failed: "the reference solution failed its own tests",
  starter_passes: "the starter code already passed every test",
};

// The words for a refused `POST /activities/generate`.
export function generateErrorText(error) {
  if (!(error instanceof ApiError)) return `Generating failed: ${error.message || error}`;
  const details = (error.body && error.body.error && error.body.error.details) || {};
  switch (error.code) {
    case "judge_unavailable":
      return `Problems cannot be generated here: the code judge is unavailable (judge_unavailable). ${error.message}`.trim();
    case "rate_limited": {
      const wait = Number(details.retry_after_s);
      const when = Number.isFinite(wait) ? ` Try again in ${formatWait(wait)}.` : " Try again later.";
      return `You have generated as many activities as allowed for now (rate_limited).${when}`;
    }
    case "turn_in_progress":
      return "That chat is still busy with another answer or generation (turn_in_progress); wait for it to finish.";
    case "provider_unavailable":
      return `The model is unavailable, so no problems can be written (provider_unavailable). ${error.message}`.trim();
    default:
      return `Generating failed (${error.code}): ${error.message}`;
  }
}

function formatWait(seconds) {
  if (seconds < 90) return `${Math.max(1, Math.ceil(seconds))} s`;
  return `${Math.ceil(seconds / 60)} min`;
}

// One generation on screen: the steps list, the meter and the status line.
class GenerationView {
  constructor(count) {
    this.count = count;
    this.stored = 0;
    this.failed = 0;
    this.items = new Map();
    this.reasons = new Map(); // index -> why its last draft was rejected
    this.rejections = new Map(); // index -> one line per rejected draft, in order
    $("generate-box").hidden = false;
    $("generate-steps").replaceChildren();
    $("generate-meter").max = count;
    $("generate-meter").value = 0;
  }

  status(text, kind = "") {
    const line = $("generate-status");
    line.className = kind === "error" ? "notice notice-error" : kind === "done" ? "notice" : "";
    line.textContent = text;
  }

  item(index) {
    if (!this.items.has(index)) {
      const node = el("li", { class: "generate-step", "data-index": String(index) });
      this.items.set(index, node);
      $("generate-steps").append(node);
    }
    return this.items.get(index);
  }

  // The problem's line keeps the list of its rejected drafts under it: a retry or a success
  // replaces the line's text, never the reasons the earlier drafts were refused.
  line(index, state, text) {
    const node = this.item(index);
    node.dataset.state = state;
    const rejections = this.rejections.get(index) || [];
    const why = rejections.length
      ? el("ul", { class: "step-rejections" }, ...rejections.map((reason) => el("li", { text: reason })))
      : null;
    const head = el("span", { class: "step-text", text: `Problem ${index + 1}: ${text}` });
    node.replaceChildren(...(why ? [head, why] : [head]));
  }

  // At the end of a stopped job, the problem that was still being drafted says it was stopped.
  stopRunning() {
    for (const [index, node] of this.items) {
      if (node.dataset.state === "running") this.line(index, "stopped", "stopped before a draft was kept");
    }
  }

  onEvent(event) {
    const data = event.data || {};
    const index = Number(data.index);
    switch (event.event) {
      case "job.started":
        this.status(`Writing ${data.count} ${data.language} problem(s)…`);
        break;
      case "problem.started":
        this.line(index, "running", data.attempt > 1 ? `drafting again (attempt ${data.attempt})…` : "drafting…");
        break;
      case "problem.rejected": {
        const reason = REJECTIONS[data.code] || data.code;
        this.reasons.set(index, reason);
        this.rejections.set(index, [...(this.rejections.get(index) || []),
          `Draft ${data.attempt} rejected: ${reason} (${data.code})`]);
        this.line(index, "rejected", `draft ${data.attempt} rejected`);
        break;
      }
      case "problem.stored":
        this.stored += 1;
        $("generate-meter").value = this.stored + this.failed;
        this.line(index, "stored", `ready: ${data.title}`);
        this.status(`${this.stored} of ${this.count} problem(s) ready…`);
        break;
      case "problem.failed":
        this.failed += 1;
        $("generate-meter").value = this.stored + this.failed;
        this.line(index, "failed", `failed after ${data.attempts} drafts` +
          (this.reasons.has(index) ? ` (last: ${this.reasons.get(index)})` : ""));
        break;
      default:
        break;
    }
  }
}

async function follow(job, view, signal) {
  let lastId = null;
  for (let round = 0; round < MAX_FOLLOWS; round += 1) {
    const end = await followTurn(job.session_id, job.turn_id, lastId, (event) => {
      if (event.id) lastId = event.id;
      view.onEvent(event);
    }, signal);
    if (end) return end;
  }
  return null;
}

function finish(view, end, job, onReady) {
  if (!end) {
    view.status("Lost the progress stream; the activity list below shows how the generation ended.", "error");
    listActivities();
    return;
  }
  const data = end.data || {};
  if (end.event === "error") {
    const error = data.error || {};
    view.status(`Generation failed (${error.code || "error"}): ${error.message || "no problem was stored"}`, "error");
    listActivities();
    return;
  }
  const made = (data.problems || []).length;
  if (data.stopped) view.stopRunning();
  if (data.status === "failed" || made === 0) {
    const why = data.stopped ? "you stopped it" : "every draft was rejected; try another topic or try again";
    view.status(`No problem was generated (${why}).`, "error");
  } else if (data.stopped && made < view.count) {
    view.status(`${made} of ${view.count} problem(s) generated before you stopped it.`, "done");
  } else if (data.status === "partial") {
    view.status(`${made} of ${view.count} problem(s) generated; the others failed.`, "done");
  } else {
    view.status(`All ${made} problem(s) are ready.`, "done");
  }
  if (made > 0) onReady(job.activity_id);  // loads it, and lists it
  else listActivities();  // the list shows the failed or stopped activity too
}

// `onReady(activityId)`: load the activity's problems once some were stored.
export function initGenerate(onReady) {
  const form = $("generate-form");
  const button = $("generate-button");
  const stop = $("generate-stop");
  let job = null;
  let view = null;
  stop.addEventListener("click", async () => {
    stop.disabled = true;
    if (!job) return;
    try {
      await cancelTurn(job.session_id, job.turn_id);
    } catch (error) {
      if (error.status === 409 || !job) return; // no_turn_in_progress: the job is ending by itself
      stop.disabled = false;
      view.status(`Could not stop the generation (${error.code}): ${error.message}`, "error");
    }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (job) return;
    const count = Number($("generate-count").value) || 1;
    const body = { topic: $("generate-topic").value.trim(), language: $("generate-language").value, count,
      difficulty: $("generate-difficulty").value };
    view = new GenerationView(count);
    view.status("Asking the server to generate…");
    button.disabled = true;
    try {
      job = await api("POST", "/activities/generate", body);
    } catch (error) {
      view.status(generateErrorText(error), "error");
      $("generate-steps").replaceChildren();
      $("generate-meter").hidden = true;
      button.disabled = false;
      return;
    }
    $("generate-meter").hidden = false;
    stop.hidden = false;
    stop.disabled = false;
    try {
      finish(view, await follow(job, view), job, onReady);
    } catch (error) {
      view.status(`Lost the progress stream (${error.code || error.name}); reopen the panel to see the activity.`, "error");
    } finally {
      job = null;
      stop.hidden = true;
      button.disabled = false;
    }
  });
}
