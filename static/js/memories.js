// The memory page: the facts the assistant keeps about the user (what "remember that…" saves),
// listed newest first, searched with the server's full-text index, edited inline and deleted
// after an inline confirmation. A modal <dialog>: the focus stays inside while it is open,
// Escape closes it (or first ends an edit or a pending delete), and the focus goes back to the
// Memories button. API: GET/POST /api/memories, PATCH/DELETE /api/memories/<id>.

import { api } from "/static/js/api.js";
import { el } from "/static/js/render.js";

const $ = (id) => document.getElementById(id);
const PAGE = 50;
const MAX_CHARS = 2000; // as the server's bound (and /remember's)
const SEARCH_DELAY_MS = 250;

const view = { query: "", before: null, searchTimer: null, opener: null, busy: false };

function dialog() {
  let node = $("memories-dialog");
  if (node) return node;
  const close = el("button", { type: "button", id: "memories-close", class: "icon-button", "aria-label": "Close memories", text: "✕" });
  const search = el("input", { id: "memories-search", type: "search", maxlength: "500", autocomplete: "off", placeholder: "Words in a memory" });
  const addText = el("textarea", { id: "memories-new", rows: "2", maxlength: String(MAX_CHARS), required: true });
  const addForm = el("form", { id: "memories-add", class: "stack memories-add" },
    el("label", { for: "memories-new", text: "Add a memory" }), addText,
    el("button", { type: "submit", class: "primary", text: "Add" }));
  node = el("dialog", { id: "memories-dialog", class: "memories-dialog", "aria-labelledby": "memories-title", "aria-describedby": "memories-about" },
    el("div", { class: "memories-head" }, el("h2", { id: "memories-title", text: "Memories" }), close),
    el("p", { id: "memories-about", class: "muted", text: "Facts the assistant keeps about you and uses in every chat. It saves one when you ask it to remember something; you can correct or delete any of them here." }),
    el("form", { id: "memories-search-form", class: "row", role: "search" },
      el("label", { for: "memories-search", text: "Search" }), search,
      el("button", { type: "submit", text: "Search" })),
    el("p", { id: "memories-status", class: "memories-status", role: "status" }),
    el("ul", { id: "memories-list", class: "memories-list", "aria-label": "Your memories" }),
    el("button", { id: "memories-more", type: "button", class: "link-button", text: "Show older memories", hidden: true }),
    addForm);
  document.body.append(node);
  close.addEventListener("click", () => node.close());
  node.addEventListener("close", () => {
    const opener = view.opener;
    view.opener = null;
    if (opener) opener.focus();
  });
  // the page's own Escape (layout.js: close the side panel) is not for a key pressed in here
  node.addEventListener("keydown", (event) => {
    if (event.key === "Escape") event.stopPropagation();
  });
  // Escape ends an edit or a pending delete first; the next Escape closes the page
  node.addEventListener("cancel", (event) => {
    const pending = node.querySelector(".memory-item.editing, .memory-item.confirming");
    if (pending) {
      event.preventDefault();
      showItem(pending, pending.memory, { focus: pending.classList.contains("confirming") ? "delete" : "edit" });
    }
  });
  $("memories-search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    load(search.value.trim());
  });
  search.addEventListener("input", () => {
    clearTimeout(view.searchTimer);
    view.searchTimer = setTimeout(() => load(search.value.trim()), SEARCH_DELAY_MS);
  });
  $("memories-more").addEventListener("click", () => load(view.query, { more: true }));
  addForm.addEventListener("submit", (event) => {
    event.preventDefault();
    addMemory(addText);
  });
  return node;
}

function say(text, kind = "") {
  const status = $("memories-status");
  status.className = `memories-status ${kind}`.trim();
  status.textContent = text;
}

function when(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

function item(memory) {
  const node = el("li", { class: "memory-item", "data-memory": String(memory.id) });
  node.memory = memory;
  showItem(node, memory);
  return node;
}

// The memory as text with Edit and Delete buttons.
function showItem(node, memory, { focus = null } = {}) {
  node.memory = memory;
  node.classList.remove("editing", "confirming");
  const edit = el("button", { type: "button", class: "memory-edit", text: "Edit", "aria-label": `Edit memory: ${short(memory.content)}` });
  const remove = el("button", { type: "button", class: "memory-delete", text: "Delete", "aria-label": `Delete memory: ${short(memory.content)}` });
  edit.addEventListener("click", () => editItem(node));
  remove.addEventListener("click", () => confirmDelete(node));
  const changed = memory.updated_at !== memory.created_at ? ` · edited ${when(memory.updated_at)}` : "";
  node.replaceChildren(
    el("p", { class: "memory-text", text: memory.content }),
    el("div", { class: "row memory-actions" },
      el("span", { class: "muted memory-date", text: `Saved ${when(memory.created_at)}${changed}` }), edit, remove));
  if (focus === "edit") edit.focus();
  if (focus === "delete") remove.focus();
}

function short(text) {
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}

function editItem(node) {
  const memory = node.memory;
  const id = `memory-edit-${memory.id}`;
  const text = el("textarea", { id, class: "memory-editor", rows: "3", maxlength: String(MAX_CHARS), required: true });
  text.value = memory.content;
  const form = el("form", { class: "stack" },
    el("label", { for: id, class: "visually-hidden", text: "Memory text" }), text,
    el("div", { class: "row" },
      el("button", { type: "submit", class: "primary", text: "Save" }),
      el("button", { type: "button", class: "memory-cancel", text: "Cancel" })));
  form.querySelector(".memory-cancel").addEventListener("click", () => showItem(node, memory, { focus: "edit" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    save(node, text);
  });
  node.classList.add("editing");
  node.replaceChildren(form);
  text.focus();
}

async function save(node, text) {
  const content = text.value.trim();
  if (!content) {
    say("A memory cannot be empty; delete it instead.", "memories-error");
    text.focus();
    return;
  }
  try {
    const memory = await api("PATCH", `/api/memories/${node.memory.id}`, { content });
    showItem(node, memory, { focus: "edit" });
    say("Memory saved.");
  } catch (error) {
    say(`The memory was not saved: ${error.message}`, "memories-error");
    text.focus();
  }
}

function confirmDelete(node) {
  const memory = node.memory;
  const yes = el("button", { type: "button", class: "danger memory-confirm", text: "Delete" });
  const no = el("button", { type: "button", class: "memory-keep", text: "Keep it" });
  yes.addEventListener("click", () => remove(node));
  no.addEventListener("click", () => showItem(node, memory, { focus: "delete" }));
  node.classList.add("confirming");
  node.replaceChildren(
    el("p", { class: "memory-text", text: memory.content }),
    el("div", { class: "row memory-actions", role: "group", "aria-label": "Delete this memory?" },
      el("strong", { text: "Delete this memory?" }), yes, no));
  no.focus();
}

async function remove(node) {
  try {
    await api("DELETE", `/api/memories/${node.memory.id}`);
  } catch (error) {
    if (error.status !== 404) {
      say(`The memory was not deleted: ${error.message}`, "memories-error");
      return;
    }
  }
  const next = node.nextElementSibling || node.previousElementSibling;
  node.remove();
  say("Memory deleted.");
  if (next) next.querySelector(".memory-edit")?.focus();
  else {
    showEmpty();
    $("memories-search").focus();
  }
}

function showEmpty() {
  if ($("memories-list").children.length) return;
  say(view.query
    ? `No memory matches “${view.query}”.`
    : "No memories yet. In a chat, ask the assistant to remember something (for example “remember that I prefer metric units”), or add one below.");
}

async function load(query, { more = false } = {}) {
  view.query = query;
  if (!more) view.before = null;
  const params = new URLSearchParams({ limit: String(PAGE) });
  if (query) params.set("q", query);
  if (more && view.before) params.set("before", String(view.before));
  const list = $("memories-list");
  try {
    const page = await api("GET", `/api/memories?${params}`);
    if (query !== view.query) return; // a newer search is on its way
    const items = page.memories.map(item);
    if (more) list.append(...items);
    else list.replaceChildren(...items);
    view.before = page.memories.length ? page.memories[page.memories.length - 1].id : view.before;
    $("memories-more").hidden = !(page.has_more && !query);
    if (list.children.length) say(query ? `${list.children.length} matching ${list.children.length === 1 ? "memory" : "memories"}.` : "");
    else showEmpty();
    if (more && items.length) items[0].querySelector(".memory-edit").focus();
  } catch (error) {
    say(`Could not load your memories: ${error.message}`, "memories-error");
  }
}

async function addMemory(text) {
  const content = text.value.trim();
  if (!content) return;
  try {
    const memory = await api("POST", "/api/memories", { content });
    text.value = "";
    $("memories-search").value = "";
    await load("");
    say(`Memory added: ${short(memory.content)}`);
  } catch (error) {
    say(`The memory was not added: ${error.message}`, "memories-error");
  }
}

export function openMemories(opener = document.activeElement) {
  const node = dialog();
  view.opener = opener;
  $("memories-search").value = "";
  node.showModal();
  $("memories-search").focus();
  load("");
}

export function initMemories() {
  for (const id of ["memories-toggle", "drawer-memories-button"]) {
    $(id).addEventListener("click", (event) => openMemories(event.currentTarget));
  }
}
