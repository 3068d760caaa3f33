// Interactive widgets (SPEC section 8): a pending `ui_tools` call of /ask_choice, /ask_text
// or /confirm renders as a small form inside the conversation; its stored answer (a
// `ui_tools` message with meta.kind "ui_result") renders as a compact "You answered" line.
// An approval (SPEC 8, Approval: widget "approval") shows the exact command the model wants
// to run (its line and body, meta.command_line and meta.body) with "Run" / "Don't run"; its
// result is the command's own tool block (meta.approval "approved" or "declined").
// The question, the options and the command come from the model: they only ever go in
// through textContent (el(..., {text})), never as HTML.

import { el } from "/static/js/render.js";

export const UI_PENDING = "ui_pending";
export const UI_RESULT = "ui_result";
const MAX_ANSWER_CHARS = 2000; // tools/interactive.py MAX_ANSWER_CHARS
const CONFIRM_LABELS = { true: "Confirm", false: "Make changes" };
const APPROVAL_LABELS = { true: "Run", false: "Don't run" };

const controllers = new Map(); // tool_call_id -> the widget on the page
const answers = new Map(); // tool_call_id -> the answer's output, when it was seen first

export function isWidgetCall(message) {
  const meta = message.meta || {};
  return meta.kind === UI_PENDING && Boolean(meta.output && meta.output.widget) && Boolean(meta.tool_call_id);
}

export function isWidgetAnswer(message) {
  const meta = message.meta || {};
  return meta.kind === UI_RESULT && !meta.approval;
}

// The result of a command that asked first: it renders as the command's tool block; the
// approval widget above it shows what the user chose.
export function isApprovalResult(message) {
  const meta = message.meta || {};
  return meta.kind === UI_RESULT && (meta.approval === "approved" || meta.approval === "declined");
}

export function noteApproval(message) {
  const meta = message.meta || {};
  if (!meta.tool_call_id) return;
  const value = meta.approval === "approved";
  answers.set(meta.tool_call_id, { value });
  const widget = controllers.get(meta.tool_call_id);
  if (widget) widget.answered(value);
}

export function widgetFor(toolCallId) {
  return controllers.get(toolCallId) || null;
}

// A different conversation is on screen: forget the widgets of the last one.
export function resetWidgets() {
  controllers.clear();
  answers.clear();
}

function domId(prefix, toolCallId) {
  return `${prefix}-${String(toolCallId).replace(/[^\w-]/g, "_")}`;
}

function sameOption(a, b) {
  return typeof a === "string" && typeof b === "string" && a.trim().toLowerCase() === b.trim().toLowerCase();
}

// Set a live region's text only when it changes: an answer is marked when it is posted and
// again when its stored message is drawn, and the status says it once.
function say(region, text) {
  if (region.textContent !== text) region.textContent = text;
}

function answerText(widget, value) {
  if (widget === "confirm") return value ? "Confirmed" : "Asked for changes";
  if (widget === "approval") return value ? "Run" : "Not run";
  return String(value ?? "");
}

// A widget for a pending call; `onAnswer(controller, value, inputMethod)` submits an answer.
export function renderWidget(message, onAnswer) {
  const meta = message.meta;
  const output = meta.output;
  const kind = output.widget;
  const callId = meta.tool_call_id;
  const questionId = domId("widget-q", callId);
  const root = el("section", {
    class: `widget widget-${kind}`,
    "data-tool-call-id": callId,
    "data-status": meta.status === "pending" ? "pending" : "answered",
    "aria-labelledby": questionId,
  });
  const form = el("form", { class: "widget-form", novalidate: true });
  const fieldset = el("fieldset", { class: "widget-fieldset" });
  const legend = el("legend", { class: "widget-question", id: questionId, text: output.question || "" });
  fieldset.append(legend);
  const status = el("p", { class: "widget-status muted", "aria-live": "polite" });
  const error = el("p", { class: "widget-error", role: "alert", hidden: true });
  const field = kind === "approval"
    ? el("p", { class: "widget-field muted", text: "Nothing runs until you choose." })
    : el("p", { class: "widget-field muted" },
      kind === "confirm" ? "Confirms the profile field " : "Your answer is saved to your profile as ",
      el("code", { text: output.target_field || "" }), ".");
  if (kind === "approval") {
    const command = [meta.command_line || `/${meta.command || ""}`, meta.body || ""].filter(Boolean).join("\n");
    fieldset.append(el("pre", { class: "widget-command" }, el("code", { text: command })));
  }

  const choices = []; // [button, value]
  const yesNo = kind === "confirm" || kind === "approval";
  let textInput = null;
  const submit = (value, inputMethod) => {
    if (root.dataset.status !== "pending" || fieldset.disabled) return;
    onAnswer(controller, value, inputMethod);
  };

  if (kind === "text") {
    const inputId = domId("widget-input", callId);
    textInput = el("input", {
      id: inputId, class: "widget-input", type: "text", maxlength: String(MAX_ANSWER_CHARS),
      autocomplete: "off", placeholder: "Type your answer", "aria-describedby": questionId,
    });
    const send = el("button", { type: "submit", class: "primary widget-send", text: "Send" });
    fieldset.append(
      el("div", { class: "widget-row" },
        el("label", { class: "visually-hidden", for: inputId, text: "Your answer" }), textInput, send),
    );
    textInput.addEventListener("input", () => controller.clearError());
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const value = textInput.value.trim();
      if (!value) {
        controller.error("Type an answer first.");
        textInput.focus();
        return;
      }
      submit(value, "text");
    });
  } else {
    form.addEventListener("submit", (event) => event.preventDefault());
    const row = el("div", { class: "widget-options" }); // the fieldset is the labelled group
    const labels = kind === "approval" ? APPROVAL_LABELS : CONFIRM_LABELS;
    const values = yesNo ? [true, false] : output.options || [];
    for (const value of values) {
      const label = yesNo ? labels[value] : String(value);
      const button = el("button", {
        type: "button",
        class: yesNo && value ? "primary widget-option" : "widget-option",
        "aria-label": yesNo ? label : `Answer: ${label}`,
        "aria-describedby": questionId,
        "aria-pressed": "false",
        text: label,
      });
      button.addEventListener("click", () => submit(value, "selection"));
      choices.push([button, value]);
      row.append(button);
    }
    fieldset.append(row);
  }
  form.append(fieldset);
  root.append(
    el("h2", { class: "visually-hidden", text: kind === "approval" ? "The assistant asks to run a command" : "The assistant asks" }),
    form, status, error, field,
  );

  const controller = {
    message,
    node: root,
    body(value, inputMethod) {
      return {
        conversationId: message.session_id,
        toolCallId: callId,
        toolName: meta.command,
        targetField: output.target_field,
        value,
        inputMethod,
      };
    },
    busy(on) {
      // Disabling the focused option would drop the focus to <body>: the widget holds it
      // (and says "Sending your answer…") until the answer is in.
      if (on && fieldset.contains(document.activeElement)) {
        root.tabIndex = -1;
        root.focus();
      }
      fieldset.disabled = on || root.dataset.status !== "pending";
      root.setAttribute("aria-busy", String(on));
      root.classList.toggle("widget-busy", on);
      if (on) {
        say(status, "Sending your answer…");
        this.clearError();
      } else if (root.dataset.status === "pending") {
        say(status, "");
      }
    },
    answered(value, known = value !== undefined && value !== null) {
      root.dataset.status = "answered";
      root.classList.remove("widget-busy");
      root.removeAttribute("aria-busy");
      fieldset.disabled = true;
      if (known) {
        for (const [button, option] of choices) {
          const chosen = yesNo ? option === Boolean(value) : sameOption(option, value);
          button.classList.toggle("chosen", chosen);
          button.setAttribute("aria-pressed", String(chosen));
        }
        if (textInput) textInput.value = String(value);
        say(status, `Answered: ${answerText(kind, value)}`);
      } else if (!status.textContent.startsWith("Answered")) {
        say(status, "Answered");
      }
    },
    closed(text) {
      root.dataset.status = "closed";
      fieldset.disabled = true;
      say(status, "This question can no longer be answered.");
      this.error(text);
    },
    error(text) {
      say(error, text);
      error.hidden = !text;
    },
    clearError() {
      error.textContent = "";
      error.hidden = true;
    },
    focus() {
      const target = textInput || (choices[0] && choices[0][0]);
      if (target && !fieldset.disabled) target.focus();
    },
  };

  controllers.set(callId, controller);
  if (meta.status !== "pending") {
    const seen = answers.get(callId);
    if (seen) controller.answered(seen.value);
    else controller.answered(null, false);
  }
  return root;
}

// The stored answer (or the stored failure of an answer) of a widget, compactly.
export function renderAnswer(message) {
  const meta = message.meta || {};
  if (meta.ok === false) {
    return withHeading(
      "Your answer was not saved",
      el(
        "div",
        { class: "answer-failed" },
        el("span", { class: "badge badge-error", title: meta.code || "error", text: "not saved" }),
        el("span", { text: ` Your answer was not saved: ${meta.message || "something went wrong"}` }),
      ),
    );
  }
  const output = meta.output || {};
  if (meta.tool_call_id) {
    answers.set(meta.tool_call_id, output);
    const widget = controllers.get(meta.tool_call_id);
    if (widget) widget.answered(output.value);
  }
  let text;
  if (output.widget === "confirm") {
    text = output.value
      ? `You confirmed your ${output.target_field}.`
      : `You asked to change your ${output.target_field}.`;
  } else {
    text = `You answered: ${String(output.value ?? "")}`;
  }
  return withHeading("Your answer", el("div", { class: "answer-chip", text }));
}

function withHeading(heading, node) {
  const fragment = document.createDocumentFragment();
  fragment.append(el("h2", { class: "visually-hidden", text: heading }), node);
  return fragment;
}
