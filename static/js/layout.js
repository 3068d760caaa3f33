// Page layout: the conversations drawer on narrow screens, the side panel (code runner,
// problems), and Escape, which closes whichever of them is open.

import { listActivities } from "/static/js/panels.js";

const $ = (id) => document.getElementById(id);

export function closeDrawer() {
  document.body.classList.remove("drawer-open");
  $("sessions-toggle").setAttribute("aria-expanded", "false");
}

function showPanel(which) {
  const panel = $("side-panel");
  const same = !panel.hidden && panel.dataset.view === which;
  panel.hidden = same;
  panel.dataset.view = which;
  $("code-panel").hidden = which !== "code";
  $("problems-panel").hidden = which !== "problems";
  $("side-title").textContent = which === "code" ? "Code" : "Problems";
  $("code-toggle").setAttribute("aria-expanded", String(!same && which === "code"));
  $("problems-toggle").setAttribute("aria-expanded", String(!same && which === "problems"));
  document.body.classList.toggle("panel-open", !same);
  if (!same) (which === "code" ? $("run-code") : $("activity-id")).focus();
  if (!same && which === "problems") listActivities();
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

  $("code-toggle").addEventListener("click", () => showPanel("code"));
  $("problems-toggle").addEventListener("click", () => showPanel("problems"));
  $("side-close").addEventListener("click", () => {
    const which = $("side-panel").dataset.view;
    showPanel(which);
    (which === "code" ? $("code-toggle") : $("problems-toggle")).focus();
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
