// Bundles the web UI's modules (static/js/app.js and everything it imports, the vendored
// libraries included) into static/dist/ with esbuild: a cold page load then fetches a handful of
// minified files instead of some fifty modules one by one (figures: bench/README.md, ui.py).
// Code that a module imports with `import()` (highlight.js, KaTeX) stays a chunk of its own,
// fetched on first use as before. api/ui.py serves the bundle only while its stamp matches the
// sources, so an edited module is served as written until the next `scripts/setup.sh`.
//
//   node web/bundle.mjs            (scripts/setup.sh runs it each time: it takes a fraction of a second)
//   node web/bundle.mjs --stamp    (prints the sources' stamp only; tests/api/test_ui_page.py)

import { createHash } from "node:crypto";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = path.join(root, "static", "dist");

// The modules import each other by their URL ("/static/js/x.js"): the files under static/.
const staticRoot = {
  name: "static-root",
  setup(build) {
    build.onResolve({ filter: /^\/static\// }, (args) => ({ path: path.join(root, args.path) }));
  },
};

// What the bundle is made of, as api/ui.py computes it (`bundle_stamp`): every .js and .mjs
// under static/js and static/vendor, by path, then content.
function sourceStamp() {
  const hash = createHash("sha256");
  for (const folder of ["js", "vendor"]) {
    const base = path.join(root, "static", folder);
    const files = readdirSync(base, { recursive: true })
      .filter((name) => /\.m?js$/.test(name))
      .sort();
    for (const name of files) {
      hash.update(`static/${folder}/${name.split(path.sep).join("/")}\n`);
      hash.update(readFileSync(path.join(base, name)));
    }
  }
  return hash.digest("hex");
}

if (process.argv.includes("--stamp")) {
  console.log(sourceStamp());
  process.exit(0);
}

rmSync(out, { recursive: true, force: true });
await esbuild.build({
  entryPoints: [path.join(root, "static", "js", "app.js")],
  bundle: true,
  format: "esm",
  splitting: true,
  minify: true,
  target: "es2022",
  outdir: out,
  entryNames: "[name]",
  chunkNames: "[name]-[hash]",
  plugins: [staticRoot],
  logLevel: "warning",
});
writeFileSync(path.join(out, "stamp"), sourceStamp() + "\n");
