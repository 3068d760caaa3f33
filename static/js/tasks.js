// The Tasks panel: the learner's imported tasks (SPEC section 10) through the same tools the
// model uses, called directly (`POST /tools/<name>`): get_ready lists what can be worked on,
// show_task opens one, start_task starts it, submit grades an answer, request_help asks an
// instructor, go_back reopens a closed task (its reason goes into the task's history). Task
// tools answer errors as `{"success": false, "error_code", "message"}`; those messages (and
// the tools' `message` fields) tell the model which command to call next, so the panel says
// things in its own words instead (task_texts.js) and offers buttons, never commands.

import { api, ApiError } from "/static/js/api.js";
import { el, renderMarkdown } from "/static/js/render.js";
import { failure, nextStep, readySummary, submitted } from "/static/js/task_texts.js";

const $ = (id) => document.getElementById(id);
const LIST_LIMIT = 20; // get_ready's own maximum
const CHECK_MARKS = { true: ["✔", "passed", "test-pass"], false: ["✘", "failed", "test-fail"], null: ["…", "waiting for review", "test-wait"] };

export class TaskError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// One task tool call; a refusal becomes a TaskError with the tool's code and message.
export async function callTaskTool(name, body) {
  try {
    return await api("POST", `/tools/${encodeURIComponent(name)}`, body);
  } catch (error) {
    if (!(error instanceof ApiError)) throw new TaskError("network_error", String(error.message || error));
    const data = error.body || {};
    if (data.error_code) throw new TaskError(data.error_code, data.message || error.message);
    throw new TaskError(error.code, error.message);
  }
}

function say(text, kind = "info") {
  // #task-status is the panel's one live region (role=status): each new text is announced
  // once, errors included (a nested alert would be read twice)
  $("task-status").replaceChildren(el("p", { class: kind === "error" ? "notice notice-error" : "notice", text }));
}

function statusBadge(status, blocked = false) {
  const kind = status === "closed" ? "badge-ok" : blocked ? "badge-error" : status === "open" ? "" : "badge-warn";
  const label = blocked ? `${status}, blocked` : status.replace("_", " ");
  return el("span", { class: `badge ${kind}`.trim(), "data-status": status, text: label });
}

// The ready tasks as buttons that open them.
export async function listTasks() {
  const list = $("task-list");
  const summary = $("tasks-summary");
  summary.textContent = "Loading tasks…";
  try {
    const data = await callTaskTool("get_ready", { limit: LIST_LIMIT });
    summary.textContent = readySummary(data);
    list.replaceChildren(
      ...(data.tasks || []).map((task) => {
        const open = el("button", { type: "button", class: "task-open", "data-task": task.id },
          el("span", { class: "task-name", text: task.title }),
          el("span", { class: "muted mono", text: ` ${task.id} · P${task.priority}` }));
        open.addEventListener("click", () => openTask(task.id));
        return el("li", { class: "task-item" }, open, statusBadge(task.status, task.blocked));
      }),
    );
  } catch (error) {
    summary.textContent = "";
    list.replaceChildren();
    say(failure("list", error), "error");
  }
}

export async function openTask(taskId, { quiet = false } = {}) {
  const detail = $("task-detail");
  try {
    const task = await callTaskTool("show_task", { task_id: taskId });
    renderTask(task);
    detail.hidden = false;
    if (!quiet) {
      $("task-status").replaceChildren();
      $("task-title").focus();
    }
    return task;
  } catch (error) {
    say(failure("open", error), "error");
    return null;
  }
}

function section(title, ...children) {
  return el("section", { class: "task-section" }, el("h4", { text: title }), ...children);
}

function renderTask(task) {
  const detail = $("task-detail");
  const title = el("h3", { id: "task-title", tabindex: "-1", text: task.title });
  const head = el("div", { class: "row task-head" }, statusBadge(task.status, task.blocked_by.length > 0),
    el("span", { class: "muted mono", text: `${task.project_id}/${task.id} · ${task.task_type} · P${task.priority}` }));
  const parts = [title, head];
  if (task.description) {
    const text = el("div", { class: "markdown task-description" });
    text.append(renderMarkdown(task.description));
    parts.push(text);
  }
  if (task.learning_objectives.length) {
    parts.push(section("Objectives", el("ul", {}, ...task.learning_objectives.map((o) => el("li", { text: `${o.level}: ${o.description}` })))));
  }
  parts.push(section("Acceptance criteria", el("ul", { class: "criteria" }, ...task.acceptance_criteria.map(criterionItem))));
  const related = [...task.dependencies.map((d) => ["Depends on", d]), ...task.children.map((c) => ["Subtask", c])];
  if (related.length) {
    parts.push(section("Related tasks", el("ul", {}, ...related.map(([kind, other]) => {
      const open = el("button", { type: "button", class: "link-button", text: `${other.title} (${other.id})` });
      open.addEventListener("click", () => openTask(other.id));
      return el("li", {}, `${kind}: `, open, " ", statusBadge(other.status, other.blocked));
    }))));
  }
  const attempts = task.submission_count ? `${task.submission_count} attempt(s), latest ${task.latest_result}` : "No attempts yet";
  parts.push(el("p", { class: "muted", text: attempts }), el("p", { class: "task-next", text: nextStep(task) }));
  parts.push(actions(task));
  if (task.history && task.history.length) parts.push(historySection(task.history));
  parts.push(el("div", { id: "task-result", class: "verdict-box" }));
  detail.replaceChildren(...parts);
}

function criterionItem(criterion) {
  const extra = [];
  if (criterion.language && criterion.language !== "text") extra.push(criterion.language);
  if (criterion.tests) extra.push(`${criterion.tests} test(s)`);
  const item = el("li", {}, el("span", { class: "badge", text: criterion.type }), ` ${criterion.description}`);
  if (extra.length) item.append(el("span", { class: "muted", text: ` (${extra.join(", ")})` }));
  if (criterion.tables && criterion.tables.length) item.append(el("pre", { class: "output", text: criterion.tables.join("\n") }));
  if (criterion.rubric) item.append(el("p", { class: "muted", text: `Rubric: ${criterion.rubric}` }));
  return item;
}

// Start when the task is open and unblocked; an answer box once it is started.
function actions(task) {
  const box = el("div", { class: "task-actions stack" });
  const blocked = task.blocked_by.length > 0;
  if (task.status === "open") {
    const start = el("button", { type: "button", class: "primary", text: "Start task", disabled: blocked });
    if (blocked) box.append(el("p", { class: "muted", text: `Blocked until you close: ${task.blocked_by.join(", ")}` }));
    start.addEventListener("click", () => startTask(task, start));
    box.append(start);
  } else if (task.status === "closed") {
    const reopen = el("button", { type: "button", class: "task-reopen", text: "Reopen task" });
    reopen.addEventListener("click", () => askText(box, reopen, {
      id: "task-reopen-reason", label: "Why do you reopen it? (kept in the task's history)", value: "I want to work on it again.",
      action: "Reopen", run: (text, button) => reopenTask(task, text, button),
    }));
    box.append(reopen);
  } else if (task.status === "in_progress" || task.status === "submitted") {
    const id = "task-answer";
    const answer = el("textarea", { id, class: "code-input", rows: "8", spellcheck: "false" });
    const submit = el("button", { type: "submit", class: "primary", text: "Submit answer" });
    const form = el("form", { class: "stack" }, el("label", { for: id, text: "Your answer" }), answer, submit);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      submitAnswer(task, answer, submit);
    });
    box.append(form);
  }
  if (task.status !== "closed") {
    const help = el("button", { type: "button", class: "task-help", text: "Ask for help" });
    help.addEventListener("click", () => askText(box, help, {
      id: "task-help-message", label: "What are you stuck on? (an instructor reads it)", value: "",
      action: "Send to an instructor", run: (text, button) => askForHelp(task, text, button),
    }));
    box.append(help);
  }
  return box;
}

// A small inline form (a reason to reopen, a question for an instructor) opened by `opener`;
// Cancel or Escape closes it and gives the focus back to the opener.
function askText(box, opener, { id, label, value, action, run }) {
  const old = document.getElementById(id);
  if (old) {
    old.focus();
    return;
  }
  const text = el("textarea", { id, rows: "3", maxlength: "1000", required: true });
  text.value = value;
  const send = el("button", { type: "submit", class: "primary", text: action });
  const cancel = el("button", { type: "button", text: "Cancel" });
  const form = el("form", { class: "stack task-ask" }, el("label", { for: id, text: label }), text,
    el("div", { class: "row" }, send, cancel));
  const close = () => {
    form.remove();
    opener.hidden = false;
    opener.focus();
  };
  cancel.addEventListener("click", close);
  form.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation(); // the form closes, not the whole panel (layout.js)
      close();
    }
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (text.value.trim().length < 3) {
      say("Write a few words (at least 3 characters) first.", "error");
      text.focus();
      return;
    }
    run(text.value.trim(), send);
  });
  opener.hidden = true;
  opener.after(form);
  text.focus();
  text.select();
}

const HISTORY_WORDS = { start: "Started", submit: "Submitted", review: "Reviewed", go_back: "Reopened" };

function historySection(events) {
  return section("History", el("ol", { class: "task-history" }, ...events.map((event) => el("li", {},
    el("span", { text: `${HISTORY_WORDS[event.action] || event.action}: ${event.from_status.replace("_", " ")} → ${event.to_status.replace("_", " ")}` }),
    event.reason ? el("span", { class: "muted", text: ` (“${event.reason}”)` }) : null,
    el("span", { class: "muted", text: ` · ${new Date(event.created_at).toLocaleString()}` })))));
}

async function reopenTask(task, reason, button) {
  button.disabled = true;
  const ref = `${task.project_id}/${task.id}`;
  try {
    await callTaskTool("go_back", { task_id: ref, reason });
    await openTask(ref, { quiet: true });
    say(`Reopened “${task.title}”: you can work on it and submit a new answer.`);
    const answer = $("task-answer");
    if (answer) answer.focus();
    listTasks();
  } catch (error) {
    button.disabled = false;
    say(failure("reopen", error, task.title), "error");
  }
}

async function askForHelp(task, message, button) {
  button.disabled = true;
  const ref = `${task.project_id}/${task.id}`;
  try {
    await callTaskTool("request_help", { task_id: ref, message });
    await openTask(ref, { quiet: true });
    say(`Your question about “${task.title}” is sent; an instructor will answer.`);
    $("task-title").focus();
  } catch (error) {
    button.disabled = false;
    say(failure("help", error, task.title), "error");
  }
}

async function startTask(task, button) {
  button.disabled = true;
  try {
    const data = await callTaskTool("start_task", { task_id: `${task.project_id}/${task.id}` });
    await openTask(`${task.project_id}/${task.id}`, { quiet: true });
    say(data.new_status !== data.old_status ? `Started '${task.title}'.` : `You are already working on '${task.title}'.`);
    const answer = $("task-answer");
    if (answer) answer.focus();
    listTasks();
  } catch (error) {
    button.disabled = false;
    say(failure("start", error, task.title), "error");
  }
}

async function submitAnswer(task, answer, button) {
  if (!answer.value.trim()) {
    say("Write an answer first.", "error");
    answer.focus();
    return;
  }
  button.disabled = true;
  say("Grading your answer…");
  const ref = `${task.project_id}/${task.id}`;
  try {
    const data = await callTaskTool("submit", { task_id: ref, answer: answer.value });
    const reopened = await openTask(ref, { quiet: true });
    const result = renderSubmission(data);
    $("task-result").replaceChildren(result);
    say(submitted(data, task.title));
    const again = $("task-answer");
    if (reopened && again) {
      again.value = answer.value; // keep the text to fix it
      again.focus();
    } else if (reopened) {
      $("task-title").focus();
    }
    listTasks();
  } catch (error) {
    button.disabled = false;
    say(failure("submit", error, task.title), "error");
  }
}

function renderSubmission(data) {
  const passed = data.result === "passed";
  const kind = passed ? "badge-ok" : data.result === "failed" ? "badge-error" : "badge-warn";
  const box = el("div", { class: "verdict task-verdict" });
  box.append(el("div", { class: "verdict-head" }, el("strong", { text: `Attempt ${data.attempt} ` }),
    el("span", { class: `badge ${kind}`, text: data.result.replace("_", " ") }),
    el("span", { class: "muted", text: `status: ${data.new_status.replace("_", " ")}` })));
  const list = el("ul", { class: "test-list" });
  for (const check of data.checks || []) {
    const [mark, word, css] = CHECK_MARKS[String(check.passed)];
    list.append(el("li", { class: css },
      el("span", { "aria-hidden": "true", text: `${mark} ` }),
      el("span", { class: "visually-hidden", text: `${word}: ` }),
      el("strong", { text: check.criterion_id }),
      el("span", { class: "muted", text: ` [${check.type}] ${check.message}` })));
  }
  box.append(list);
  return box;
}

export function initTasksPanel() {
  $("tasks-refresh").addEventListener("click", () => listTasks());
  $("task-open-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("task-open-id").value.trim();
    if (id) openTask(id);
  });
}
