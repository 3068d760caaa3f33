// Searching all of the user's chats (GET /search): the box in the conversations panel, the
// results as buttons, and opening one: its chat, scrolled to the message, highlighted, even
// when the message is older than the chat's first page (older pages load until it shows).

import { api } from "/static/js/api.js";
import { stopFollowing } from "/static/js/follow.js";
import { loadOlder } from "/static/js/history.js";
import { closeDrawer } from "/static/js/layout.js";
import { flash, messageList } from "/static/js/messages.js";
import { el } from "/static/js/render.js";
import { openSession } from "/static/js/sessions.js";
import { state } from "/static/js/state.js";

const $ = (id) => document.getElementById(id);
const MAX_PAGES = 200; // older pages loaded at most to reach a result (50 messages each)
const HIT = "search-hit";

// `**word**` markers (storage/search_terms.py) -> text with <mark>; never HTML from the server.
function snippetNode(snippet) {
  const node = el("span", { class: "hit-snippet" });
  String(snippet)
    .split("**")
    .forEach((part, index) => node.append(index % 2 ? el("mark", { text: part }) : document.createTextNode(part)));
  return node;
}

function messageNodeById(id) {
  return messageList().querySelector(`.message[data-id="${CSS.escape(String(id))}"]`);
}

// Open the chat of a hit at its message.
export async function openHit(hit) {
  closeDrawer();
  // The hit may be in a version not on screen: show the version that holds it first (a running
  // turn refuses with 409; the chat then opens on the version it shows).
  await api("POST", `/sessions/${encodeURIComponent(hit.session_id)}/branch`, { message_id: hit.message_id }).catch(() => {});
  await openSession(hit.session_id);
  let node = messageNodeById(hit.message_id);
  for (let pages = 0; !node && pages < MAX_PAGES && state.sessionId === hit.session_id; pages += 1) {
    if (!(await loadOlder()) && !messageNodeById(hit.message_id)) break;
    node = messageNodeById(hit.message_id);
  }
  if (!node) {
    flash("That message is no longer in this chat.");
    return;
  }
  for (const old of messageList().querySelectorAll(`.${HIT}`)) old.classList.remove(HIT);
  stopFollowing();
  node.classList.add(HIT);
  node.setAttribute("tabindex", "-1");
  // Only the message list scrolls (scrollIntoView would also move the page, whose body clips).
  const box = $("messages");
  const at = node.getBoundingClientRect();
  const top = box.scrollTop + at.top - box.getBoundingClientRect().top;
  box.scrollTop = Math.max(0, top - Math.max(0, (box.clientHeight - at.height) / 2));
  node.focus({ preventScroll: true });
}

function showResults(results, query) {
  const list = $("chat-search-results");
  list.replaceChildren();
  for (const hit of results) {
    const who = hit.role === "user" ? "You" : "Assistant";
    const button = el(
      "button",
      { type: "button", class: "hit-open" },
      el("span", { class: "hit-chat", text: hit.session_name }),
      el("span", { class: "hit-who muted", text: `${who}: ` }),
      snippetNode(hit.snippet),
    );
    button.addEventListener("click", () => openHit(hit));
    list.append(el("li", {}, button));
  }
  list.hidden = results.length === 0;
  $("chat-search-status").textContent = results.length
    ? `${results.length} result${results.length === 1 ? "" : "s"} for “${query}”`
    : `Nothing found for “${query}”`;
}

function clearSearch() {
  $("chat-search-results").replaceChildren();
  $("chat-search-results").hidden = true;
  $("chat-search-status").textContent = "";
}

export function initChatSearch() {
  const input = $("chat-search-input");
  $("chat-search-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const query = input.value.trim();
    if (!query) return clearSearch();
    try {
      const data = await api("GET", `/search?q=${encodeURIComponent(query)}&limit=20`);
      showResults(data.results || [], query);
    } catch (error) {
      $("chat-search-status").textContent = `Search failed: ${error.message}`;
    }
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && input.value) {
      event.stopPropagation(); // first Escape clears the search, the next closes the drawer
      input.value = "";
      clearSearch();
    }
  });
  input.addEventListener("search", () => {
    if (!input.value) clearSearch();
  });
}
