// The side panel: a code runner (POST /run) and the problems of an activity
// (GET /activities/<id>, POST /submit). Both show the judge's verdict and output; when the
// server has no judge (404, or 503 judge_unavailable) the panel says so plainly.

import { api, ApiError } from "/static/js/api.js";
import { badge, el, formatMs, renderMarkdown } from "/static/js/render.js";

export const ENTRY_FILES = {
  python: "main.py",
  javascript: "main.js",
  c: "main.c",
  cpp: "main.cpp",
  java: "Main.java",
  sql: "query.sql",
};

// The code panel's starter program per language: each reads a name on stdin and greets it,
// so Run gives the same visible result in every language.
export const SAMPLES = {
  python: 'name = input() or "world"\nprint(f"Hello, {name}!")\n',
  javascript: 'const input = require("fs").readFileSync(0, "utf8").trim();\nconsole.log(`Hello, ${input || "world"}!`);\n',
  c: '#include <stdio.h>\n\nint main(void) {\n    char name[100] = "world";\n    scanf("%99s", name);\n    printf("Hello, %s!\\n", name);\n    return 0;\n}\n',
  cpp: '#include <iostream>\n#include <string>\n\nint main() {\n    std::string name = "world";\n    std::cin >> name;\n    std::cout << "Hello, " << name << "!" << std::endl;\n    return 0;\n}\n',
  java: 'import java.util.Scanner;\n\npublic class Main {\n    public static void main(String[] args) {\n        Scanner in = new Scanner(System.in);\n        String name = in.hasNext() ? in.next() : "world";\n        System.out.println("Hello, " + name + "!");\n    }\n}\n',
  sql: "CREATE TABLE greetings (name TEXT);\nINSERT INTO greetings VALUES ('world');\nSELECT 'Hello, ' || name || '!' AS greeting FROM greetings;\n",
};

const $ = (id) => document.getElementById(id);

export function judgeErrorText(error, what) {
  if (!(error instanceof ApiError)) return `${what} failed: ${error.message || error}`;
  if (error.code === "judge_preparing") return error.message; // "The code runner is being prepared…" (status.js)
  if (error.code === "judge_unavailable" || error.status === 503) {
    return `The code judge is unavailable on this server (judge_unavailable). ${error.message || ""}`.trim();
  }
  if (error.status === 404) {
    return `${what} is not available on this server yet (judge_unavailable: the endpoint answered 404).`;
  }
  return `${what} failed: ${error.code}: ${error.message}`;
}

// A verdict box: status badge, exit code, duration, stdout/stderr, per-test results.
export function renderVerdict(result) {
  const ok = result.status === "ok";
  const box = el("div", { class: "verdict" });
  const head = el("div", { class: "verdict-head" }, el("strong", { text: "Verdict " }), badge(ok, result.status));
  if (result.exit_code !== undefined && result.exit_code !== null) {
    head.append(el("span", { class: "muted", text: `exit ${result.exit_code}` }));
  }
  if (typeof result.duration_ms === "number") head.append(el("span", { class: "muted", text: formatMs(result.duration_ms) }));
  if (result.truncated) head.append(el("span", { class: "badge badge-warn", text: "output truncated" }));
  box.append(head);
  if (Array.isArray(result.tests)) {
    const passed = result.tests.filter((test) => test.passed).length;
    box.append(el("p", { class: "muted", text: `${passed} / ${result.tests.length} tests passed` }));
    const list = el("ul", { class: "test-list" });
    for (const test of result.tests) {
      list.append(
        el(
          "li",
          { class: test.passed ? "test-pass" : "test-fail" },
          el("span", { "aria-hidden": "true", text: test.passed ? "✔ " : "✘ " }),
          el("span", { class: "visually-hidden", text: test.passed ? "passed: " : "failed: " }),
          el("strong", { text: test.name || "test" }),
          test.message ? el("span", { class: "muted", text: ` ${test.message}` }) : null,
        ),
      );
    }
    box.append(list);
  }
  for (const stream of ["stdout", "stderr"]) {
    if (result[stream]) {
      box.append(el("h3", { class: "stream-title", text: stream }), el("pre", { class: `output ${stream}`, text: result[stream] }));
    }
  }
  return box;
}

// No role of its own: every box a notice goes into (#run-result, a problem's verdict box,
// #activity-status) is the live region that announces it, once (a nested alert was read twice).
function notice(text, kind = "error") {
  return el("p", { class: kind === "error" ? "notice notice-error" : "notice", text });
}

export function initCodePanel() {
  const language = $("run-language");
  const file = $("run-file");
  const result = $("run-result");
  const button = $("run-button");
  const code = $("run-code");
  let shown = language.value; // the language whose sample the editor holds, if unedited
  // A new language brings its own sample unless the user wrote code of their own (kept:
  // "Use the sample" replaces it on purpose).
  const follow = (force) => {
    file.textContent = ENTRY_FILES[language.value];
    const untouched = !code.value.trim() || code.value === SAMPLES[shown];
    if (force || untouched) code.value = SAMPLES[language.value] || "";
    shown = language.value;
    $("run-sample").hidden = code.value === SAMPLES[language.value];
  };
  language.addEventListener("change", () => follow(false));
  code.addEventListener("input", () => ($("run-sample").hidden = code.value === SAMPLES[language.value]));
  $("run-sample").addEventListener("click", () => {
    follow(true);
    code.focus();
  });
  follow(true);
  $("run-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    result.replaceChildren(el("p", { class: "muted", text: "Running…" }));
    try {
      const body = { language: language.value, files: { [ENTRY_FILES[language.value]]: $("run-code").value }, stdin: $("run-stdin").value };
      result.replaceChildren(renderVerdict(await api("POST", "/run", body)));
    } catch (error) {
      result.replaceChildren(notice(judgeErrorText(error, "Running code")));
    } finally {
      button.disabled = false;
    }
  });
}

function problemFiles(problem) {
  const files = problem.starter_files || problem.files;
  if (files && typeof files === "object") return files;
  const entry = ENTRY_FILES[problem.language] || "main.py";
  return { [entry]: problem.starter_code || problem.starter || "" };
}

function renderProblem(problem, fallbackLanguage) {
  const language = problem.language || fallbackLanguage || "python";
  const files = problemFiles({ ...problem, language });
  const [path] = Object.keys(files);
  const id = String(problem.id);
  const item = el("li", { class: "problem" });
  item.append(el("h3", { text: problem.title || `Problem ${id}` }));
  if (problem.difficulty) item.append(el("span", { class: "badge", text: problem.difficulty }));
  const statement = el("div", { class: "markdown problem-statement" });
  statement.append(renderMarkdown(problem.statement || problem.description || ""));
  const editorId = `problem-code-${id.replace(/[^\w-]/g, "_")}`;
  const editor = el("textarea", { id: editorId, class: "code-input", rows: "8", spellcheck: "false" });
  editor.value = files[path] || "";
  const submit = el("button", { type: "button", class: "primary", text: "Submit" });
  const verdict = el("div", { class: "verdict-box", "aria-live": "polite" });
  submit.addEventListener("click", async () => {
    submit.disabled = true;
    verdict.replaceChildren(el("p", { class: "muted", text: "Judging…" }));
    try {
      const body = { problem_id: id, language, files: { ...files, [path]: editor.value } };
      verdict.replaceChildren(renderVerdict(await api("POST", "/submit", body)));
    } catch (error) {
      verdict.replaceChildren(notice(judgeErrorText(error, "Submitting")));
    } finally {
      submit.disabled = false;
    }
  });
  item.append(
    statement,
    el("label", { for: editorId, text: `Your solution (${path}, ${language})` }),
    editor,
    submit,
    verdict,
  );
  return item;
}

// The user's activities (GET /activities) as buttons that load one; quiet when unavailable.
export async function listActivities() {
  const box = $("activity-list");
  let data;
  try {
    data = await api("GET", "/activities");
  } catch (error) {
    // the panel still opens an activity by its id: the list's failure is only logged
    console.error("Could not list your activities:", error);
    box.replaceChildren();
    return;
  }
  box.replaceChildren(
    ...(data.activities || []).map((activity) => {
      const open = el("button", { type: "button", class: "link-button", text: `${activity.topic} (${activity.language}, ${activity.status})` });
      open.addEventListener("click", () => {
        $("activity-id").value = activity.id;
        $("activity-form").requestSubmit();
      });
      return el("li", {}, open);
    }),
  );
}

// Show activity `id`'s problems in the panel (after a generation, or from the list).
export function loadActivity(id) {
  $("activity-id").value = id;
  $("activity-form").requestSubmit();
  listActivities();
}

export function initProblemsPanel() {
  const status = $("activity-status");
  const list = $("problem-list");
  $("activity-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const id = $("activity-id").value.trim();
    if (!id) return;
    status.replaceChildren(el("span", { text: "Loading…" }));
    list.replaceChildren();
    try {
      const data = await api("GET", `/activities/${encodeURIComponent(id)}`);
      const activity = data.activity || data;
      const problems = activity.problems || data.problems || [];
      status.replaceChildren(
        el("span", { text: `${activity.title || activity.topic || `Activity ${id}`}: ${problems.length} problem(s)` }),
      );
      for (const problem of problems) list.append(renderProblem(problem, activity.language));
    } catch (error) {
      const text =
        error instanceof ApiError && error.status === 404
          ? "No activity with this id (404), or this server has no activities endpoint."
          : judgeErrorText(error, "Loading the activity");
      status.replaceChildren(notice(text));
    }
  });
}
