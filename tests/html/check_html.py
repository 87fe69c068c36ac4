#!/usr/bin/python3
"""Checks of the `qwen-conform check --html` page, for tests/cli/test_html_report.sh.

    check_html.py static PAGE.html [--text T]... [--no-tag TAG]...
        The file as written: self-contained (a Content-Security-Policy with default-src 'none';
        no <link>, <iframe>, <object>, <embed>, <img>, <script src>; no src / href / xlink:href
        / action / formaction / poster / data attribute outside the page itself ('#...' or
        '?...'); no url( / @import in a <style> or style attribute), one <script>, every
        given text present in the page's text (after unescaping) and no element of a --no-tag.
    check_html.py dom DUMPED.html [--script-ok] [--text T]... [--no-tag TAG]...
                      [--shown N] [--visible-verdicts V,...] [--visible-text T]
        The DOM chromium --dump-dom printed after the page's script ran: <html
        data-qc-script="ok"> (--script-ok), the texts, the absent tags, N rows of the table not
        hidden, each of them with a verdict of V and containing T.
    check_html.py png FILE.png W H
        A PNG of W x H pixels.
Exit 0 when every check holds; 1 (naming each failed check) otherwise; 2 on bad usage.
"""
import argparse
import html.parser
import re
import struct
import sys

URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "poster", "data", "srcset"}
EXTERNAL_TAGS = {"link", "iframe", "object", "embed", "img", "frame", "audio", "video", "source"}


class Page(html.parser.HTMLParser):
    """Tags, attributes, text, the style text and the table rows of a page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags = []            # (tag, {attr: value})
        self.text = []
        self.style = []
        self.scripts = 0
        self.rows = []            # table rows: [attrs, text parts]
        self._in = None           # "style" / "script" while inside one
        self._row = None

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        self.tags.append((tag, a))
        if "style" in a:
            self.style.append(a["style"])
        if tag in ("style", "script"):
            self._in = tag
            self.scripts += tag == "script"
        if tag == "tr" and re.fullmatch(r"r\d+", a.get("id", "")):
            self._row = [a, []]
            self.rows.append(self._row)

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self._in = None
        if tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._in == "style":
            self.style.append(data)
        elif self._in is None:
            self.text.append(data)
            if self._row is not None:
                self._row[1].append(data)


def parse(path):
    p = Page()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    p.close()
    return p


def common(p, args, errs):
    text = "".join(p.text)
    for t in args.text or []:
        if t not in text:
            errs.append("text %r not in the page" % t)
    for tag in args.no_tag or []:
        n = sum(1 for t, _ in p.tags if t == tag)
        if n:
            errs.append("%d <%s> element(s) (escaped text would never make one)" % (n, tag))


def cmd_static(args):
    p, errs = parse(args.page), []
    csp = [a.get("content", "") for t, a in p.tags
           if t == "meta" and a.get("http-equiv", "").lower() == "content-security-policy"]
    if not csp or "default-src 'none'" not in csp[0]:
        errs.append("no Content-Security-Policy meta with default-src 'none'")
    for tag, a in p.tags:
        if tag in EXTERNAL_TAGS:
            errs.append("<%s> loads a resource: %r" % (tag, a))
        if tag == "script" and "src" in a:
            errs.append("<script src=%r>" % a["src"])
        for k, v in a.items():
            if k in URL_ATTRS and not v.startswith(("#", "?")):
                errs.append("<%s %s=%r>: a reference outside the page" % (tag, k, v))
    for s in p.style:
        if re.search(r"url\s*\(|@import", s, re.I):
            errs.append("style loads something: %r" % s[:80])
    if p.scripts != 1:
        errs.append("%d <script> elements (expected the one inline script)" % p.scripts)
    common(p, args, errs)
    return errs, "%d tags, %d rows, %d KB" % (len(p.tags), len(p.rows),
                                               sum(len(x) for x in p.text) // 1024)


def cmd_dom(args):
    p, errs = parse(args.page), []
    root = [a for t, a in p.tags if t == "html"]
    state = root[0].get("data-qc-script") if root else None
    if args.script_ok and state != "ok":
        errs.append("<html data-qc-script=%r>: the page's script did not finish" % state)
    common(p, args, errs)
    vis = [(a, "".join(t)) for a, t in p.rows if "hidden" not in a]
    if args.shown is not None and len(vis) != args.shown:
        errs.append("%d rows shown, expected %d" % (len(vis), args.shown))
    want = set((args.visible_verdicts or "").split(",")) - {""}
    for a, t in vis:
        if want and a.get("data-v") not in want:
            errs.append("row %s shown with verdict %s" % (a.get("id"), a.get("data-v")))
        if args.visible_text and args.visible_text not in t:
            errs.append("row %s shown without %r" % (a.get("id"), args.visible_text))
    return errs, "script %s, %d of %d rows shown" % (state, len(vis), len(p.rows))


def cmd_png(args):
    with open(args.png, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n":
        return ["%s: not a PNG" % args.png], ""
    w, h = struct.unpack(">II", head[16:24])
    errs = [] if (w, h) == (args.w, args.h) else ["%dx%d, expected %dx%d" % (w, h, args.w, args.h)]
    return errs, "%dx%d" % (w, h)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("static", "dom"):
        s = sub.add_parser(name)
        s.add_argument("page")
        s.add_argument("--text", action="append")
        s.add_argument("--no-tag", action="append")
        if name == "dom":
            s.add_argument("--script-ok", action="store_true")
            s.add_argument("--shown", type=int)
            s.add_argument("--visible-verdicts")
            s.add_argument("--visible-text")
    s = sub.add_parser("png")
    s.add_argument("png")
    s.add_argument("w", type=int)
    s.add_argument("h", type=int)
    args = ap.parse_args()
    errs, note = {"static": cmd_static, "dom": cmd_dom, "png": cmd_png}[args.cmd](args)
    for e in errs:
        print("check_html.py %s: %s" % (args.cmd, e))
    if not errs:
        print("check_html.py %s: ok (%s)" % (args.cmd, note))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
