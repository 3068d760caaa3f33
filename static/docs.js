// The API reference page: renders /openapi.json (operations grouped by tag, parameters,
// request and response schemas, an example body) with no library and no network beyond
// this origin. Schemas are shown as JSON; `$ref`s link to the Schemas section.
"use strict";

const METHODS = ["get", "post", "put", "patch", "delete"];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value; else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function refName(ref) { return ref.split("/").pop(); }

// A small example value for a schema (first enum value, defaults, required properties).
function example(schema, components, depth = 0) {
  if (!schema || depth > 6) return null;
  if (schema.$ref) return example(components[refName(schema.$ref)], components, depth + 1);
  if (schema.default !== undefined) return schema.default;
  if (schema.const !== undefined) return schema.const;
  if (schema.enum) return schema.enum[0];
  const choice = schema.anyOf || schema.oneOf;
  if (choice) return example(choice.find((s) => s.type !== "null") || choice[0], components, depth + 1);
  switch (schema.type) {
    case "object": {
      const out = {};
      for (const name of schema.required || Object.keys(schema.properties || {}).slice(0, 3)) {
        out[name] = example((schema.properties || {})[name], components, depth + 1);
      }
      return out;
    }
    case "array": return [example(schema.items, components, depth + 1)];
    case "integer": return schema.minimum ?? 1;
    case "number": return schema.minimum ?? 1.5;
    case "boolean": return true;
    case "string": return schema.enum ? schema.enum[0] : "string";
    default: return null;
  }
}

// Schema JSON with every `$ref` turned into a link to its component.
function schemaView(schema) {
  const pre = el("pre");
  const text = JSON.stringify(schema, null, 2);
  let last = 0;
  for (const match of text.matchAll(/"#\/components\/schemas\/([^"]+)"/g)) {
    pre.append(text.slice(last, match.index));
    pre.append(el("a", { href: `#schema-${match[1]}` }, match[0]));
    last = match.index + match[0].length;
  }
  pre.append(text.slice(last));
  return pre;
}

// A schema that is only a `$ref` shown as the component it names (one level; deeper refs stay links).
function namedSchemaView(schema, components) {
  if (!schema || !schema.$ref || !components[refName(schema.$ref)]) return schemaView(schema);
  const name = refName(schema.$ref);
  return el("div", {}, el("a", { href: `#schema-${name}` }, name), schemaView(components[name]));
}

function parametersView(parameters) {
  if (!parameters || !parameters.length) return null;
  const rows = parameters.map((p) => el("tr", {}, el("td", {}, p.name), el("td", {}, p.in),
    el("td", {}, JSON.stringify(p.schema)), el("td", {}, p.description || "")));
  return el("div", {}, el("h4", {}, "Parameters"),
    el("table", {}, el("tr", {}, el("th", {}, "name"), el("th", {}, "in"), el("th", {}, "schema"), el("th", {}, "")), ...rows));
}

function bodyView(body, components) {
  if (!body) return null;
  const box = el("div", {}, el("h4", {}, `Request body${body.required ? "" : " (optional)"}`));
  for (const [media, content] of Object.entries(body.content)) {
    box.append(el("p", {}, media), namedSchemaView(content.schema, components));
    if (media === "application/json") {
      box.append(el("p", {}, "Example"), el("pre", {}, JSON.stringify(example(content.schema, components), null, 2)));
    }
  }
  return box;
}

function responsesView(responses, components) {
  const box = el("div", {}, el("h4", {}, "Responses"));
  for (const [status, answer] of Object.entries(responses)) {
    const item = el("details", {}, el("summary", {}, el("span", { class: "status" }, status), " ", answer.description));
    for (const [media, content] of Object.entries(answer.content || {})) {
      item.append(el("p", {}, media), namedSchemaView(content.schema, components));
    }
    box.append(item);
  }
  return box;
}

function operationView(method, path, op, components) {
  const summary = el("summary", {}, el("span", { class: `method m-${method}` }, method.toUpperCase()),
    el("span", { class: "path" }, path), el("span", { class: "summary" }, op.summary || ""),
    op.security && op.security.length ? el("span", { class: "lock", title: "needs a bearer token or the login cookie" }, "auth") : null);
  const body = el("div", { class: "op-body" },
    op.description ? el("p", {}, op.description) : null,
    el("p", {}, el("code", {}, op.operationId)),
    parametersView(op.parameters), bodyView(op.requestBody, components), responsesView(op.responses, components));
  const node = el("details", { class: "op", id: `op-${op.operationId}` }, summary, body);
  node.dataset.search = `${method} ${path} ${op.summary || ""}`.toLowerCase();
  return node;
}

function render(doc) {
  const components = (doc.components || {}).schemas || {};
  document.getElementById("title").textContent = `${doc.info.title} (OpenAPI ${doc.openapi})`;
  document.getElementById("intro").textContent = doc.info.description || "";
  const byTag = new Map((doc.tags || []).map((t) => [t.name, []]));
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of METHODS) {
      if (!item[method]) continue;
      const tag = (item[method].tags || ["other"])[0];
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push(operationView(method, path, item[method], components));
    }
  }
  const main = document.getElementById("operations");
  const toc = document.getElementById("toc");
  for (const [tag, ops] of byTag) {
    if (!ops.length) continue;
    toc.append(el("a", { href: `#tag-${tag}` }, `${tag} (${ops.length})`));
    main.append(el("h2", { id: `tag-${tag}` }, tag), ...ops);
  }
  const schemas = document.getElementById("schemas");
  for (const [name, schema] of Object.entries(components)) {
    schemas.append(el("details", { id: `schema-${name}` }, el("summary", {}, name), schemaView(schema)));
  }
  document.getElementById("filter").addEventListener("input", (event) => {
    const words = event.target.value.toLowerCase().trim();
    for (const op of main.querySelectorAll("details.op")) op.classList.toggle("hidden", !op.dataset.search.includes(words));
  });
  window.addEventListener("hashchange", openTarget);
  openTarget();
}

function openTarget() {
  const target = location.hash && document.getElementById(location.hash.slice(1));
  if (target && target.tagName === "DETAILS") target.open = true;
}

fetch("/openapi.json")
  .then((response) => {
    if (!response.ok) throw new Error(`GET /openapi.json answered ${response.status}`);
    return response.json();
  })
  .then(render)
  .catch((error) => { document.getElementById("intro").textContent = `Could not load the document: ${error.message}`; });
