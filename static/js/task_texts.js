// What the Tasks panel says to a person. The task tools' own `message` fields are written for
// the model (they name commands such as "/start_task <id>" so that a model can make the next
// call); the panel never shows them. It says things in its own words, from the tools'
// structured fields (status, result, counts) and error codes, and offers buttons instead.

const ACTIONS = {
  start: "start", submit: "submit an answer to", reopen: "reopen", help: "ask for help with", open: "open", list: "list",
};

export function readySummary(data) {
  const tasks = data.tasks || [];
  const total = data.total_ready ?? tasks.length;
  if (!total) return "No task is ready for you now: everything is done, waiting for a review, or waiting for another task.";
  const working = tasks.filter((task) => task.status === "in_progress").length;
  const shown = tasks.length < total ? ` (the first ${tasks.length} are shown)` : "";
  const doing = working ? `, ${working} of them in progress` : "";
  return `${total} ${total === 1 ? "task" : "tasks"} ready for you${doing}${shown}. Open one to see it and start it.`;
}

// The line under a task that says what comes next, with the panel's buttons in mind.
export function nextStep(task) {
  if (task.blocked_by.length) return "Finish the tasks it depends on first: open them from the list below.";
  switch (task.status) {
    case "open": return "Press Start task when you are ready.";
    case "in_progress": return "Write your answer below and submit it. Stuck? Ask an instructor for help.";
    case "submitted": return "Your answer waits for an instructor's review. You may submit a new answer meanwhile.";
    case "closed": return "Done. Reopen it if you want to work on it again.";
    default: return "";
  }
}

export function submitted(data, title) {
  if (data.result === "passed") return `Attempt ${data.attempt} passed: “${title}” is done.`;
  if (data.result === "pending_review") return `Attempt ${data.attempt} passed the automatic checks and waits for an instructor's review.`;
  return `Attempt ${data.attempt} did not pass; fix what failed and submit again.`;
}

// A refused call, said without the tool's instructions to the model.
export function failure(action, error, title = "") {
  const what = title ? `“${title}”` : "this task";
  const verb = ACTIONS[action] || action;
  switch (error.code) {
    case "NOT_FOUND": return action === "list" ? "No task project is loaded yet; an instructor has to import one." : `There is no task with that id. Pick one from the list, or check the id.`;
    case "BLOCKED": return `You cannot ${verb} ${what} yet: finish the tasks it depends on first.`;
    case "INVALID_STATE":
      if (action === "help") return `You already asked for help with ${what}; an instructor will answer.`;
      return `You cannot ${verb} ${what} now: its status changed. The panel shows it as it is now.`;
    case "VALIDATION_FAILED": return action === "reopen" || action === "help"
      ? "Write a few words (at least 3 characters) first."
      : `That did not work: ${action === "open" ? "several projects have a task with this id; write it as project/id" : "check what you wrote"}.`;
    case "PERMISSION_DENIED": return `You may not ${verb} ${what}.`;
    case "rate_limited": return "Too many requests in a short time; wait a moment and try again.";
    case "network_error": return "The server did not answer; check your connection and try again.";
    default: return `Could not ${verb} ${what} (${error.code}). Try again in a moment.`;
  }
}
