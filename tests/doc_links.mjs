// doc_links.mjs FILE...: every relative link of the Markdown FILEs resolves inside the
// repository: the file (or directory) exists, and a #anchor into a Markdown file names
// one of its headings (GitHub's slugs: lower case, punctuation dropped, spaces to '-',
// repeats numbered -1, -2, ...). Links in code (fenced blocks, `spans`) are not links.
// Prints "ok   - FILE: N links" or "FAIL - FILE: LINK: why" per file; exit 1 on a FAIL.
// Node without packages (tests/it_docs.sh).
import { readFileSync, existsSync, realpathSync } from "node:fs";
import { dirname, resolve, relative, sep } from "node:path";

const root = realpathSync(resolve(dirname(new URL(import.meta.url).pathname), ".."));
const prose = (md) => md.replace(/^(```|~~~)[\s\S]*?^\1/gm, "").replace(/`[^`\n]*`/g, "");
// Headings are slugged from their text as written, code spans included.
function headingAnchors(file) {
  const md = readFileSync(file, "utf8").replace(/^(```|~~~)[\s\S]*?^\1/gm, "");
  const seen = new Map();
  const out = new Set();
  for (const [, h] of md.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const s = h.toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/ /g, "-");
    const n = seen.get(s) || 0;
    seen.set(s, n + 1);
    out.add(n ? `${s}-${n}` : s);
  }
  return out;
}
let failed = 0;
for (const file of process.argv.slice(2)) {
  const text = prose(readFileSync(file, "utf8"));
  const links = [...text.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]);
  let bad = 0;
  for (const link of links) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue; // http:, https:, mailto:
    const [path, anchor] = link.split("#");
    const target = path ? resolve(dirname(file), decodeURIComponent(path)) : resolve(file);
    const why = !existsSync(target) ? "no such file"
      : relative(root, realpathSync(target)).split(sep)[0] === ".." ? "outside the repository"
      : anchor !== undefined && target.endsWith(".md") && !headingAnchors(target).has(anchor) ? `no heading #${anchor}`
      : null;
    if (why) {
      bad++;
      console.log(`FAIL - ${file}: ${link}: ${why}`);
    }
  }
  if (bad) failed++;
  else console.log(`ok   - ${file}: ${links.length} links resolve`);
}
process.exit(failed ? 1 : 0);
