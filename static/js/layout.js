// Page layout: the conversations drawer on narrow screens, the side panel (code runner,
// problems, learner tasks), and Escape, which closes whichever of them is open.

import { listActivities } from "/static/js/panels.js";
import { listTasks } from "/static/js/tasks.js";

const $ = (id) => document.getElementById(id);

export function closeDrawer() {
  document.body.classList.remove("drawer-open");
  $("sessions-toggle").setAttribute("aria-expanded", "false");
}

// The side panel's views: the toggle button, the section, the title, and what gets the focus.
const VIEWS = {
  code: { toggle: "code-toggle", section: "code-panel", title: "Code", focus: "run-code" },
  problems: { toggle: "problems-toggle", section: "problems-panel", title: "Problems", focus: "generate-topic" },
  tasks: { toggle: "tasks-toggle", section: "tasks-panel", title: "Tasks", focus: "tasks-refresh" },
};

function showPanel(which) {
  const panel = $("side-panel");
  const same = !panel.hidden && panel.dataset.view === which;
  panel.hidden = same;
  panel.dataset.view = which;
  for (const [name, view] of Object.entries(VIEWS)) {
    $(view.section).hidden = name !== which;
    $(view.toggle).setAttribute("aria-expanded", String(!same && name === which));
  }
  $("side-title").textContent = VIEWS[which].title;
  document.body.classList.toggle("panel-open", !same);
  if (same) return;
  $(VIEWS[which].focus).focus();
  if (which === "problems") listActivities();
  if (which === "tasks") listTasks();
}

export function initLayout() {
  $("sessions-toggle").addEventListener("click", () => {
    const open = document.body.classList.toggle("drawer-open");
    $("sessions-toggle").setAttribute("aria-expanded", String(open));
    if (open) $("new-session").focus();
  });

  document.addEventListener("click", (event) => {
    if (!document.body.classList.contains("drawer-open")) return;
    if ($("sessions-panel").contains(event.target) || $("sessions-toggle").contains(event.target)) return;
    closeDrawer();
  });

  for (const [name, view] of Object.entries(VIEWS)) $(view.toggle).addEventListener("click", () => showPanel(name));
  $("side-close").addEventListener("click", () => {
    const which = $("side-panel").dataset.view;
    showPanel(which);
    $(VIEWS[which].toggle).focus();
  });

  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    if (document.body.classList.contains("drawer-open")) {
      closeDrawer();
      $("sessions-toggle").focus();
    } else if (!$("side-panel").hidden) {
      $("side-close").click();
    }
  });
}
