// A stored tool message (`<tool>_tools`) as a collapsible block: the command line, a
// badge, the command's body (the SQL of /memory_sql, the program of /run_code, the content
// of /write_file, kept in `meta.body` by tools/contract.py) and the result. A /memory_sql
// result is a table built from `meta.output` (columns and rows), never from its markdown.
// Every string from a model or a tool goes in as text: the body is highlighted by
// highlight.js, which escapes its input, and table cells are set with textContent.

import { highlightCode } from "/static/js/highlighter.js";
import { badge, copyText, el, formatMs, renderMarkdown } from "/static/js/render.js";

export const MAX_TABLE_ROWS = 50; // rows drawn; the tool returns up to 200
const MAX_CELL_CHARS = 500;

// What the body of each command is, and how to highlight it.
const BODY_LABELS = { memory_sql: "SQL", run_code: "Program", write_file: "File content", edit_file: "Edit blocks" };
const RUN_LANGUAGES = { python: "python", javascript: "javascript", js: "javascript", node: "javascript", c: "c",
  cpp: "cpp", "c++": "cpp", java: "java", sql: "sql", sqlite: "sql", bash: "bash", sh: "bash" };
const EXTENSIONS = { py: "python", js: "javascript", mjs: "javascript", ts: "typescript", c: "c", h: "c", cpp: "cpp",
  cc: "cpp", hpp: "cpp", java: "java", sql: "sql", json: "json", md: "markdown", html: "xml", xml: "xml", css: "css",
  yml: "yaml", yaml: "yaml", sh: "bash", go: "go", rs: "rust", rb: "ruby", txt: "plaintext" };

// The quoted result of a stored tool message (the markdown contract of tools/contract.py):
// every result line starts with "> " and is already HTML-escaped, so it renders as text. This
// is the one thing read from the content: `meta.output` is the tool's structured data, and the
// text the tool rendered from it (with a failure's hint) is stored only here.
function contractBody(content) {
  const lines = String(content ?? "").split("\n");
  return lines.filter((line) => line === ">" || line.startsWith("> ")).join("\n");
}

// What the block says comes from `meta` (tools/contract.py stored_result: command, command_line,
// ok, code, duration_ms, output, args, body). A message stored by an older version may lack a
// key; only then is it read back from the contract text.
const legacy = {
  commandLine(content) {
    const match = /```bash\n\$ ([^\n]*)\n```/.exec(String(content ?? ""));
    return match ? match[1].replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&") : "";
  },
  ok(content) {
    return !/^> Error: /m.test(String(content ?? ""));
  },
};

function toolCommandLine(message, meta) {
  if (typeof meta.command_line === "string" && meta.command_line) return meta.command_line;
  return legacy.commandLine(message.content) || `/${meta.command || message.role}`;
}

function toolOk(message, meta) {
  return typeof meta.ok === "boolean" ? meta.ok : legacy.ok(message.content);
}

// The highlight.js language of a command's body ("plaintext" when unknown).
export function bodyLanguage(command, args) {
  const first = String(args || "").trim().split(/\s+/)[0].toLowerCase();
  if (command === "memory_sql") return "sql";
  if (command === "run_code") return RUN_LANGUAGES[first] || "plaintext";
  if (command === "write_file") {
    const dot = first.lastIndexOf(".");
    return (dot >= 0 && EXTENSIONS[first.slice(dot + 1)]) || "plaintext";
  }
  return "plaintext";
}

// The code a command ran: its body, or for a one-line /memory_sql the SQL after the name.
function commandCode(meta) {
  if (typeof meta.body === "string" && meta.body.length) return meta.body;
  if (meta.command !== "memory_sql") return "";
  if (typeof meta.args === "string") return meta.args;
  const line = String(meta.command_line || ""); // stored before `args` was kept
  return line.startsWith("/memory_sql ") ? line.slice("/memory_sql ".length) : "";
}

function codeView(text, language, label, truncated) {
  const code = el("code", { class: `hljs language-${language}` });
  code.textContent = text;
  if (language !== "plaintext") highlightCode(code, language);
  const copy = el("button", { type: "button", class: "copy-button", "aria-label": `Copy ${label.toLowerCase()}`, text: "Copy" });
  copy.addEventListener("click", () => copyText(text, copy));
  const bar = el("div", { class: "code-bar" }, el("span", { class: "code-lang", text: language === "plaintext" ? "text" : language }), copy);
  const block = el("div", { class: "code-block" }, bar, el("pre", {}, code));
  if (truncated) block.append(el("p", { class: "muted", text: "Only the beginning of the body was kept." }));
  return block;
}

// The command's body as a collapsed section of the tool block (null when it has none).
export function renderCommandBody(meta) {
  const text = commandCode(meta);
  if (!text) return null;
  const label = BODY_LABELS[meta.command] || "Command body";
  const language = bodyLanguage(meta.command, meta.args);
  const lines = text.split("\n").length;
  const section = el("details", { class: "command-body" });
  section.append(
    el("summary", { text: `${label} (${lines} line${lines === 1 ? "" : "s"})` }),
    codeView(text, language, label, Boolean(meta.body_truncated)),
  );
  return section;
}

function cellText(value) {
  if (value === null || value === undefined) return "NULL";
  const text = typeof value === "object" ? JSON.stringify(value) : String(value);
  return text.length > MAX_CELL_CHARS ? `${text.slice(0, MAX_CELL_CHARS)}…` : text;
}

// A SELECT result ({columns, rows, row_count, truncated}) as a table, at most MAX_TABLE_ROWS rows.
export function renderSqlTable(output, caption = "Query result") {
  const columns = Array.isArray(output.columns) ? output.columns : [];
  const rows = Array.isArray(output.rows) ? output.rows.filter(Array.isArray) : [];
  const total = typeof output.row_count === "number" ? output.row_count : rows.length;
  const shown = rows.slice(0, MAX_TABLE_ROWS);
  const table = el("table", { class: "sql-table" });
  table.append(el("caption", { class: "visually-hidden", text: caption }));
  const head = el("tr", {});
  for (const column of columns) head.append(el("th", { scope: "col", text: String(column) }));
  table.append(el("thead", {}, head));
  const body = el("tbody", {});
  for (const row of shown) {
    const line = el("tr", {});
    for (let index = 0; index < Math.max(columns.length, row.length); index += 1) {
      const value = row[index];
      line.append(el("td", { class: value === null ? "sql-null" : null, text: cellText(value) }));
    }
    body.append(line);
  }
  table.append(body);
  const wrap = el("div", { class: "sql-result" }, el("div", { class: "table-scroll" }, table));
  let note = `${total} row${total === 1 ? "" : "s"}`;
  if (shown.length < total) note = `Showing ${shown.length} of ${total} rows`;
  if (output.truncated) note += " (the query's result was cut at the tool's row limit)";
  wrap.append(el("p", { class: "muted sql-note", text: note }));
  return wrap;
}

function sqlRows(message, meta) {
  const output = meta.output;
  return message.role === "memory_sql_tools" && meta.ok !== false && output && output.kind === "select" && Array.isArray(output.columns);
}

export function renderToolMessage(message) {
  const meta = message.meta || {};
  const ok = toolOk(message, meta);
  const line = toolCommandLine(message, meta);
  // A generated image is the answer itself: its block starts open so the image shows inline.
  const details = el("details", { class: "tool-block", open: ok && message.role === "image_tools" });
  const summary = el(
    "summary",
    {},
    el("span", { class: "tool-icon", text: "tool" }),
    el("code", { class: "tool-command", text: line.split("\n")[0] }),
    badge(ok, meta.code),
  );
  if (typeof meta.duration_ms === "number") {
    summary.append(el("span", { class: "muted duration", text: formatMs(meta.duration_ms) }));
  }
  summary.append(el("span", { class: "visually-hidden", text: ` (${message.role}, show details)` }));
  const body = el("div", { class: "tool-output" });
  const code = renderCommandBody(meta);
  if (code) body.append(code);
  if (sqlRows(message, meta)) {
    body.append(renderSqlTable(meta.output));
  } else {
    const result = el("div", { class: "markdown" });
    result.append(renderMarkdown(contractBody(message.content)));
    body.append(result);
  }
  details.append(summary, body);
  return details;
}
