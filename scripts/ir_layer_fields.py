#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ir_layer_fields.py FILE...: moves the layer a node's note names into the
node's {layer=...} field (issue 21), in .cir files and in IR text held in C
string literals, in place.

Up to issue 21 the IR parser re-derived a node's layer from its note: a note
that is a plain identifier ("# dense_1") or a cast note "# autocast: LAYER ..."
(LAYER not "output"). The parser now reads only the field, so text written for
the old parser gets the field this script derives by that same rule. Notes
stay as they are. A line that already has layer= is left alone.
"""
import re
import sys

IDENT = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')


def note_layer(note):
    cast = note.startswith('autocast: ')
    p = note[len('autocast: '):] if cast else note
    m = IDENT.match(p)
    if not m:
        return None
    n = m.end()
    if not cast and n != len(p):
        return None
    if cast and (n == len(p) or p[n] != ' '):
        return None
    if cast and m.group(0) == 'output':
        return None
    return m.group(0)


def split_node(line, esc):
    """(head, dict or None, note) of an IR node line, or None. esc: the text
    sits in a C literal, where the IR's quote is \\" ."""
    if not line.startswith('%'):
        return None
    close = line.find(')')
    if close < 0:
        return None
    i = close + 1
    while i < len(line) and line[i] in ' \t':
        i += 1
    dict_span = None
    if i < len(line) and line[i] == '{':
        j, quoted = i + 1, False
        while j < len(line):
            c = line[j]
            if esc and line.startswith('\\\\', j):
                j += 2
                continue
            if esc and line.startswith('\\"', j):
                quoted = not quoted
                j += 2
                continue
            if not esc and c == '\\':
                j += 2
                continue
            if not esc and c == '"':
                quoted = not quoted
            elif c == '}' and not quoted:
                break
            j += 1
        if j >= len(line):
            return None
        dict_span = (i, j)
        i = j + 1
    rest = line[i:]
    h = rest.find('#')
    if h < 0:
        return None
    note = rest[h + 1:]
    if note.startswith(' '):
        note = note[1:]
    note = note.rstrip(' \t')
    return dict_span, note, i + h


def convert_line(line, esc=False):
    body = line.lstrip(' \t')
    if body is not line and body != line:
        return line[:len(line) - len(body)] + convert_line(body, esc)
    parts = split_node(line, esc)
    if not parts:
        return line
    dict_span, note, _ = parts
    if esc:
        note = note.replace('\\"', '"').replace('\\\\', '\\')
    layer = note_layer(note)
    if not layer:
        return line
    if dict_span:
        a, b = dict_span
        if re.search(r'(^|[{,\s])layer\s*=', line[a:b]):
            return line
        return line[:b] + ', layer=' + layer + line[b:]
    close = line.find(')')
    return line[:close + 1] + ' {layer=' + layer + '}' + line[close + 1:]


C_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def convert_c(text):
    out = []
    for line in text.split('\n'):
        def lit(m):
            body = m.group(1)
            if not body.startswith('%'):
                return m.group(0)
            end = body.endswith('\\n')
            core = body[:-2] if end else body
            return '"' + convert_line(core, esc=True) + ('\\n' if end else '') + '"'
        out.append(C_LITERAL.sub(lit, line))
    return '\n'.join(out)


def main():
    for path in sys.argv[1:]:
        with open(path, encoding='utf-8', newline='') as f:
            text = f.read()
        if path.endswith('.c'):
            new = convert_c(text)
        else:
            new = ''.join(convert_line(l[:-1] if l.endswith('\n') else l) + ('\n' if l.endswith('\n') else '')
                          for l in text.splitlines(True))
        if new != text:
            with open(path, 'w', encoding='utf-8', newline='') as f:
                f.write(new)
            print('converted', path)


if __name__ == '__main__':
    main()
