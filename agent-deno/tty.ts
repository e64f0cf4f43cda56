// A terminal for `sbx exec -t` in a deno sandbox. There is no kernel here, so
// no line discipline between the user's raw terminal and the program: this is
// one, the canonical mode of a Unix tty in small, with a line editor much like
// readline's (line_edit.ts). Typed characters are echoed and gathered into a
// line that the program reads once Enter comes. Typing inserts at the cursor;
// Left/Right (Ctrl-B/Ctrl-F) move it, Home/End (Ctrl-A/Ctrl-E) go to the ends;
// Backspace erases before it, Delete under it; Ctrl-U kills to the start of the
// line, Ctrl-K to its end; Tab types four spaces. Up/Down (Ctrl-P/Ctrl-N) walk
// the lines handed over before in this exec, the line being typed kept as the
// newest. Ctrl-C interrupts (and drops the line); Ctrl-D on an empty line is
// one end of input (a read returning 0), elsewhere it hands over the whole line
// so far. Other escape sequences (function keys, Alt-x) are swallowed rather
// than typed into the line. Output has "\n" turned into "\r\n" (ONLCR).

import { type Char, type Key, LineEditor } from "./line_edit.ts";

export interface TtyPorts {
  /// Bytes for the user's screen (output: "\n" still to become "\r\n").
  echo: (b: Uint8Array) => void;
  /// A finished line (with its "\n") or, on Ctrl-D, the partial one.
  line: (b: Uint8Array) => void;
  /// Ctrl-D on an empty line.
  eof: () => void;
  /// Ctrl-C.
  interrupt: () => void;
}

const enc = new TextEncoder();
const CTRL_C = 0x03, CTRL_D = 0x04, TAB = 0x09, LF = 0x0a, CR = 0x0d, ESC = 0x1b, DEL = 0x7f;
// Tab indents a Python block as four spaces: one erasable column each.
const TAB_AS: Char[] = [[0x20], [0x20], [0x20], [0x20]];

// Control characters that edit the line; the others mean nothing here.
const CTRL_KEYS: Record<number, Key> = {
  0x01: "home", 0x02: "left", 0x05: "end", 0x06: "right", 0x08: "backspace",
  0x0b: "killEnd", 0x0e: "down", 0x10: "up", 0x15: "killStart", [DEL]: "backspace",
};
// Keys sent as escape sequences: CSI (ESC [) or SS3 (ESC O) and a letter,
// whatever CSI's parameters (Ctrl-Right, CSI 1;5C, is Right); the editing pad
// as CSI n ~ (Home and End as 1 and 4 on the Linux console, 7 and 8 on rxvt).
const LETTER_KEYS: Record<string, Key> = { A: "up", B: "down", C: "right", D: "left", H: "home", F: "end" };
const TILDE_KEYS: Record<string, Key> = { 1: "home", 7: "home", 4: "end", 8: "end", 3: "del" };

export class LineDiscipline {
  private ed: LineEditor;
  // The escape sequence being read: null outside one, "" just after ESC, then
  // "[" (CSI, with its parameters as they come) or "O" (SS3).
  private seq: string | null = null;
  // The bytes so far of a multi-byte UTF-8 character: it goes in whole.
  private partial: number[] = [];

  constructor(private ports: TtyPorts) {
    this.ed = new LineEditor(ports.echo);
  }

  feed(bytes: Uint8Array) {
    for (const b of bytes) this.byte(b);
  }

  private byte(b: number) {
    if (this.seq !== null) return this.escape(b);
    if (b >= 0x80) return this.utf8(b);
    if (b >= 0x20 && b !== DEL) return this.ed.insert([[b]]);
    switch (b) {
      case ESC:
        this.seq = "";
        return;
      case CR:
      case LF:
        return this.enter();
      case CTRL_C:
        return this.interrupt();
      case CTRL_D:
        return this.ed.empty ? this.ports.eof() : this.ports.line(this.ed.take());
      case TAB:
        return this.ed.insert(TAB_AS);
    }
    const key = CTRL_KEYS[b];
    if (key) this.ed[key]();
  }

  /// A byte after ESC: a key the line editor knows once the sequence ends.
  private escape(b: number) {
    const seq = this.seq!, c = String.fromCharCode(b);
    if (seq === "") return void (this.seq = c === "[" || c === "O" ? c : null); // Alt-x: swallowed
    if (seq[0] === "[" && b >= 0x20 && b < 0x40) return void (this.seq += c); // CSI's parameters
    this.seq = null;
    const key = c === "~" ? (seq[0] === "[" ? TILDE_KEYS[seq.slice(1)] : undefined) : LETTER_KEYS[c];
    if (key) this.ed[key]();
  }

  private utf8(b: number) {
    if ((b & 0xc0) !== 0x80) this.partial = []; // a lead byte (a character cut short is dropped)
    this.partial.push(b);
    if (this.partial.length < utf8Length(this.partial[0])) return;
    this.ed.insert([this.partial]);
    this.partial = [];
  }

  private enter() {
    const line = this.ed.take();
    this.ports.echo(Uint8Array.of(LF)); // "\r\n" once it is output (onlcr)
    this.ports.line(Uint8Array.of(...line, LF));
  }

  private interrupt() {
    this.ed.drop();
    this.ports.echo(enc.encode("^C"));
    this.ports.interrupt();
  }
}

/// The bytes of the UTF-8 character that begins with `lead` (a stray
/// continuation byte stands alone).
function utf8Length(lead: number): number {
  return lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
}

/// Output as a terminal shows it: "\n" becomes "\r\n".
export function onlcr(b: Uint8Array): Uint8Array {
  let n = 0;
  for (const c of b) if (c === LF) n++;
  if (n === 0) return b;
  const out = new Uint8Array(b.length + n);
  let o = 0;
  for (const c of b) {
    if (c === LF) out[o++] = CR;
    out[o++] = c;
  }
  return out;
}
