// A live turn (SPEC 7, 7a): its progress steps, the answer as it is written, Stop, and
// following it again after a dropped connection, a reload or a switch of chats.
//
// A LiveTurn belongs to one chat (session id) and one turn id, never to "the chat on
// screen": it keeps reading its events while another chat is shown, and draws only when
// `host.onScreen(turn)` says its chat is the one on screen. The host (turns.js) decides what a
// finished turn does to the page.

import { ApiError, cancelTurn, followTurn, streamTurn } from "/static/js/api.js";
import { hasMessage, keepPinned, messageNode, showTurnMessages } from "/static/js/messages.js";
import { badge, el, formatMs, morph, renderMarkdown, settledLength } from "/static/js/render.js";

const MAX_RECONNECT_FAILURES = 5; // connection attempts in a row that bring no event
const MAX_RECONNECTS = 100; // connections per turn, whatever they bring
const RECONNECT_BASE_MS = 300; // doubled after each failure in a row
const SILENCE_MS = 45_000; // heartbeats come at least every 15 s: a quieter connection is dead

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A failed model call's badge, in a user's words (the failure classes are the server's).
const FAILURE_WORDS = {
  timeout: "no answer in time",
  idle_timeout: "stopped answering",
  connection: "connection failed",
  server_error: "server error",
  rate_limited: "overloaded",
  upstream_error: "overloaded",
  client_error: "refused",
  auth: "refused",
  not_configured: "refused",
  malformed: "unreadable reply",
  empty: "empty reply",
  circuit_open: "skipped, failing lately",
};

// ---------------------------------------------------------------- progress steps

export class Progress {
  constructor() {
    this.started = performance.now();
    this.list = el("ol", { class: "progress-steps" });
    this.title = el("span", { class: "progress-title", text: "Working…" });
    this.node = el(
      "details",
      // not a live region itself: the message list (role=log) announces each new step once
      { class: "progress running", open: true, "data-testid": "progress" },
      el("summary", {}, el("span", { class: "spinner", "aria-hidden": "true" }), this.title),
      this.list,
    );
    this.running = new Map();
    this.calls = new Map(); // pass -> the key of its latest model call
    this.writing = new Set(); // passes whose answer is being written
  }

  step(key, text) {
    const item = el("li", { class: "step running" }, el("span", { class: "step-text", text }));
    keepPinned(() => this.list.append(item));
    if (key) this.running.set(key, item);
    return item;
  }

  done(text) {
    this.step(null, text).classList.remove("running");
  }

  finish(key, text, ok, code, ms) {
    const item = this.running.get(key) || this.step(null, text);
    this.running.delete(key);
    item.classList.remove("running");
    item.querySelector(".step-text").textContent = text;
    item.append(badge(ok, code));
    if (typeof ms === "number") item.append(el("span", { class: "muted duration", text: formatMs(ms) }));
  }

  handle({ event, data }) {
    const pass = (data.pass ?? 0) + 1;
    switch (event) {
      case "turn.queued":
        // the user's share of the server's turn workers is busy with their other chats
        this.step("queued", "Waiting for your other chats to finish answering");
        break;
      case "turn.started":
        if (this.running.has("queued")) this.finish("queued", "Your turn started", true);
        else this.done("Turn started");
        break;
      case "provider.request":
        this.calls.set(pass, `provider-${pass}-${data.attempt}`);
        this.writing.delete(pass);
        this.step(`provider-${pass}-${data.attempt}`, `Calling the model (pass ${pass}${data.attempt > 1 ? ", retry" : ""})`);
        break;
      case "provider.waiting": {
        // No first token yet: the server says every second how long, and for which model.
        const item = this.running.get(this.calls.get(pass));
        if (item && !this.writing.has(pass)) {
          const seconds = Number.isFinite(data.waited_s) ? Math.round(data.waited_s) : 0;
          const who = data.model ? `${data.model} on ${data.provider}` : data.provider || "";
          item.querySelector(".step-text").textContent = `Waiting for the model, ${seconds} s… (${who ? `${who}, ` : ""}pass ${pass}${data.attempt > 1 ? ", retry" : ""})`;
          item.classList.add("waiting");
        }
        break;
      }
      case "answer.delta": {
        // The call is still running, but now it writes the answer.
        const item = this.running.get(this.calls.get(pass));
        if (item && !this.writing.has(pass)) item.querySelector(".step-text").textContent = `The model is writing the answer (pass ${pass})`;
        this.writing.add(pass);
        break;
      }
      case "provider.response":
        this.finish(
          `provider-${pass}-${data.attempt}`,
          data.ok ? `Model answered (pass ${pass}${data.provider ? `, ${data.provider}` : ""})` : `The model did not answer (pass ${pass})`,
          Boolean(data.ok), FAILURE_WORDS[data.failure] || data.failure, data.elapsed_ms,
        );
        break;
      case "pass.decided":
        this.done(`Read the model's odds: ${data.decision === "command" ? "a command" : "an answer"} (${data.reads} read${data.reads === 1 ? "" : "s"})`);
        break;
      case "command.detected":
        this.done(`Command /${data.name} detected`);
        break;
      case "approval.requested":
        this.done(`Waiting for your approval to run /${data.name}`);
        break;
      case "tool.started":
        this.step(`tool-${data.name}`, `Running /${data.name}`);
        break;
      case "tool.progress": {
        const item = this.running.get(`tool-${data.name}`);
        if (item) {
          const part = typeof data.total === "number" && data.total > 0 ? ` (${Math.round((100 * data.progress) / data.total)}%)` : "";
          const said = typeof data.message === "string" && data.message ? `: ${data.message}` : "";
          item.querySelector(".step-text").textContent = `Running /${data.name}${part}${said}`;
        }
        break;
      }
      case "tool.finished":
        this.finish(`tool-${data.name}`, `Tool /${data.name} finished`, Boolean(data.ok), data.code, data.duration_ms);
        break;
      case "answer.reset":
        this.done("The answer broke off; the model is asked again");
        break;
      default:
        break;
    }
  }

  // status: "done", "stopped" or "failed"; the steps fold into one line.
  end(status) {
    const elapsed = performance.now() - this.started;
    this.node.classList.remove("running");
    this.node.open = false;
    const steps = this.list.childElementCount;
    const word = { done: "Done", stopped: "Stopped", failed: "Failed" }[status] || "Done";
    this.title.textContent = `${word}: ${steps} step${steps === 1 ? "" : "s"} in ${formatMs(elapsed)}`;
    for (const item of this.running.values()) item.classList.remove("running");
    this.running.clear();
  }
}

// ---------------------------------------------------------------- the live turn

export class LiveTurn {
  // sessionId may be null for the first turn of a chat not created yet (turn.started names
  // it); userNode is the pending bubble of a message sent from this page.
  constructor({ sessionId, turnId = null, view, host, userNode = null }) {
    this.sessionId = sessionId;
    this.turnId = turnId;
    this.view = view;
    this.host = host;
    this.userNode = userNode;
    this.userMessageId = null;
    this.progress = new Progress();
    this.text = "";
    this.answer = null; // the growing answer, from the first answer.delta
    this.body = null;
    this.frame = 0;
    this.deltas = 0; // answer pieces received, and
    this.renders = 0; // times the answer was drawn (at most once a frame; bench/ui.py)
    this.settled = 0; // the answer's text before this is drawn for good (settledLength)
    this.settledNodes = 0; // as that many leading nodes of the body
    this.parsed = 0; // characters of Markdown rendered, all frames together (bench/ui.py)
    this.slowest = 0; // the longest render, in ms
    this.lastEventId = null;
    this.events = 0;
    this.gap = false;
    this.stopping = false;
    this.stopWhenKnown = false;
    this.ended = false;
    this.abort = new AbortController(); // the page lets go of the turn
    this.watchdog = 0;
    this.silence = 0;
  }

  onScreen() {
    return this.host.onScreen(this);
  }

  // The turn's nodes, to put at the end of the message list when its chat is shown.
  attach(list) {
    if (this.userNode && this.userMessageId !== null && hasMessage(this.userMessageId)) this.userNode = null;
    for (const node of [this.userNode, this.progress.node, this.answer]) if (node) list.append(node);
    this.render();
  }

  // ------------------------------------------------------------ reading the events

  // POST the turn (/chat, /api/ai/tool-result) and read it to its end. Resolves with
  // {event: "done"|"error", data}, {event: "refused", error} (the server turned the
  // request down before any turn ran), or null when the page let go of the turn.
  async post(path, body) {
    let end;
    try {
      end = await this.connect((signal) => streamTurn(path, body, (event) => this.handle(event), signal));
    } catch (error) {
      if (this.abort.signal.aborted) return null;
      if (error instanceof ApiError && error.status > 0) return { event: "refused", error };
      if (!this.turnId) {
        return { event: "error", data: { error: { code: error.code || "network_error", message: error.message } } };
      }
    }
    if (end) return end;
    if (!this.turnId || !this.sessionId) {
      return { event: "error", data: { error: { code: "stream_closed", message: "the connection closed before the turn started" } } };
    }
    return this.follow(); // the connection dropped: pick the turn up where it was
  }

  // Follow the turn through GET /sessions/<id>/generate/stream: from its first event, or
  // after the last one seen (Last-Event-ID). Reconnects, with a bound, when the connection
  // drops. Resolves like post(), or {event: "gone"} when the server no longer knows the turn.
  async follow() {
    let failures = 0;
    for (let connections = 0; connections < MAX_RECONNECTS && failures < MAX_RECONNECT_FAILURES; connections += 1) {
      if (failures) await sleep(RECONNECT_BASE_MS * 2 ** (failures - 1));
      if (this.abort.signal.aborted) return null;
      const seen = this.events;
      try {
        const end = await this.connect((signal) => followTurn(this.sessionId, this.turnId, this.lastEventId, (event) => this.handle(event), signal));
        if (end) return end;
      } catch (error) {
        if (this.abort.signal.aborted) return null;
        if (error.status === 404) return { event: "gone" };
        if (error.status >= 400 && error.status < 500 && error.status !== 408 && error.status !== 429) {
          return { event: "error", data: error.body && error.body.error ? error.body : { error: { code: error.code, message: error.message } } };
        }
      }
      failures = this.events > seen ? 0 : failures + 1;
    }
    return { event: "error", data: { error: { code: "stream_closed", message: "the connection to this reply was lost; reload the page to see it" } } };
  }

  // One connection, given up (as if dropped: null) after SILENCE_MS without an event.
  async connect(open) {
    const connection = new AbortController();
    const giveUp = () => connection.abort();
    this.abort.signal.addEventListener("abort", giveUp);
    this.watchdog = () => {
      clearTimeout(this.silence);
      this.silence = setTimeout(giveUp, SILENCE_MS);
    };
    this.watchdog();
    try {
      return await open(connection.signal);
    } catch (error) {
      if (error.name === "AbortError" && !this.abort.signal.aborted) return null; // silent too long
      throw error;
    } finally {
      clearTimeout(this.silence);
      this.watchdog = 0;
      this.abort.signal.removeEventListener("abort", giveUp);
    }
  }

  handle({ id, event, data }) {
    if (id) this.lastEventId = id;
    this.events += 1;
    if (this.watchdog) this.watchdog();
    data = data && typeof data === "object" ? data : {};
    if (data.turn_id && this.turnId && data.turn_id !== this.turnId) return; // another turn's
    if (data.turn_id && !this.turnId) this.turnId = data.turn_id;
    switch (event) {
      case "turn.started":
        if (data.session_id && !this.sessionId) {
          this.sessionId = data.session_id;
          this.host.sessionKnown(this);
        }
        if (this.stopWhenKnown) this.requestCancel();
        break;
      case "message.stored":
        if (data.role === "user") this.userMessageId = data.id;
        break;
      case "answer.delta":
        this.appendText(typeof data.text === "string" ? data.text : "");
        break;
      case "answer.reset":
        this.resetText();
        break;
      case "replay.gap":
        // Events were lost: what was stored comes from the server, the rest keeps coming.
        this.gap = true;
        this.host.reload(this);
        break;
      default:
        break;
    }
    this.progress.handle({ event, data });
  }

  // ------------------------------------------------------------ the growing answer

  appendText(text) {
    if (!text) return;
    this.deltas += 1;
    this.text += text;
    if (!this.answer) this.createAnswer();
    this.scheduleRender();
  }

  resetText() {
    this.text = "";
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    if (this.answer) this.answer.remove();
    this.answer = null;
    this.body = null;
    this.settled = 0;
    this.settledNodes = 0;
  }

  createAnswer() {
    this.body = el("div", { class: "bubble markdown streaming" });
    // aria-busy: screen readers wait for the finished answer (it replaces this node, and is
    // announced once) instead of reading every piece.
    this.answer = el(
      "article",
      { class: "message live-answer", "aria-busy": "true", "data-testid": "live-answer" },
      el("h2", { class: "visually-hidden", text: "Assistant is writing" }),
      this.body,
    );
    if (this.progress.node.isConnected && this.onScreen()) this.progress.node.after(this.answer);
  }

  // One render per animation frame, however many pieces arrived.
  scheduleRender() {
    if (this.frame || !this.answer || !this.onScreen()) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  render() {
    if (!this.answer || !this.answer.isConnected) return;
    this.renders += 1;
    const started = performance.now();
    keepPinned(() => {
      // Only the unfinished end is rendered again: the cost of a frame stays that of the last
      // blocks, not of the whole answer so far.
      const settled = settledLength(this.text, this.settled);
      if (settled > this.settled) {
        const done = renderMarkdown(this.text.slice(this.settled, settled), { live: true });
        this.parsed += settled - this.settled;
        morph(this.body, done, this.settledNodes);
        this.settledNodes = this.body.childNodes.length;
        this.settled = settled;
      }
      morph(this.body, renderMarkdown(this.text.slice(this.settled), { live: true }), this.settledNodes);
      this.parsed += this.text.length - this.settled;
      if (this.gap && !this.answer.querySelector(".gap-note")) {
        this.answer.append(el("p", { class: "gap-note muted", text: "Part of this answer was missed while the connection was down; all of it shows when it is finished." }));
      }
    });
    this.slowest = Math.max(this.slowest, performance.now() - started);
  }

  // ------------------------------------------------------------ stop

  async requestCancel() {
    if (this.ended) return;
    this.stopping = true;
    this.host.changed(this);
    if (!this.sessionId) {
      this.stopWhenKnown = true; // the chat is being created: stop once turn.started names it
      return;
    }
    this.stopWhenKnown = false;
    try {
      await cancelTurn(this.sessionId, this.turnId);
    } catch (error) {
      if (error.status === 409) return; // no_turn_in_progress: it is ending by itself
      this.stopping = false;
      this.host.changed(this);
      this.host.notice(this, `Could not stop the answer: ${error.message}`);
    }
  }

  // ------------------------------------------------------------ the end

  // The turn is over (status "done", "stopped" or "failed"): stop drawing, fold the steps.
  end(status) {
    this.ended = true;
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.progress.end(status);
    const { deltas, renders, parsed, slowest } = this;
    performance.mark("answer-drawn", { detail: { deltas, renders, parsed, slowest, chars: this.text.length } });
    if (this.answer) {
      this.answer.removeAttribute("aria-busy");
      this.body.classList.remove("streaming");
    }
  }

  // Let go of the turn for good (the user signed out): its stream closes, the turn goes on.
  close() {
    this.abort.abort();
  }

  // On screen, after `done`: the stored messages take the place of the live ones.
  showStored(messages) {
    const user = messages.find((message) => message.role === "user");
    if (user && !hasMessage(user.id)) {
      // The pending bubble becomes the stored message; a turn sent elsewhere gets its own.
      if (this.userNode && this.userNode.isConnected) this.userNode.replaceWith(messageNode(user));
      else if (this.progress.node.isConnected) this.progress.node.before(messageNode(user));
    } else if (user && this.userNode) {
      this.userNode.remove();
    }
    this.userNode = null;
    const anchor = this.answer && this.answer.isConnected ? this.answer : null;
    const asked = keepPinned(() => {
      const shown = showTurnMessages(messages, anchor); // skips what is on screen already
      if (this.answer) this.answer.remove();
      return shown;
    });
    this.answer = null;
    return asked;
  }

  // On screen, after `error`: what was being written is not stored, so it goes.
  dropAnswer() {
    if (this.answer) this.answer.remove();
    this.answer = null;
  }
}
