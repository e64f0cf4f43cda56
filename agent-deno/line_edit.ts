// The line being typed on a deno sandbox's terminal (tty.ts) and the lines
// typed before it (its history): each edit, and the bytes that redraw
// it on the user's screen. That screen is a real terminal in raw mode showing
// the line after a prompt we never see, so every redraw is relative to the
// cursor: "\b" or CSI n D back, the characters themselves forward, CSI K to
// clear what a shorter line leaves behind. A character is one code point (its
// UTF-8 bytes) and one column: wide characters, and lines that wrap past the
// terminal's width, are not drawn right.

/// One character: its UTF-8 bytes.
export type Char = number[];

/// What a key does to the line (the methods of LineEditor that take nothing).
export type Key =
  | "left" | "right" | "home" | "end" | "up" | "down"
  | "backspace" | "del" | "killStart" | "killEnd";

const HISTORY_MAX = 500;
const enc = new TextEncoder();
const CLEAR_TO_END = [...enc.encode("\x1b[K")];

export class LineEditor {
  // Never changed in place: a new array on each edit, so history and draft may share them.
  private line: Char[] = [];
  private cur = 0; // the cursor, an index into line
  private history: Char[][] = [];
  // The history entry shown; history.length while it is the line being typed
  // (which waits in draft while older ones are shown).
  private shown = 0;
  private draft: Char[] = [];

  constructor(private echo: (b: Uint8Array) => void) {}

  get empty() {
    return this.line.length === 0;
  }

  insert(chars: Char[]) {
    this.splice(this.cur, this.cur, chars, this.cur + chars.length);
  }

  backspace() {
    if (this.cur > 0) this.splice(this.cur - 1, this.cur, [], this.cur - 1);
  }

  del() {
    if (this.cur < this.line.length) this.splice(this.cur, this.cur + 1, [], this.cur);
  }

  killStart() {
    this.splice(0, this.cur, [], 0);
  }

  killEnd() {
    this.splice(this.cur, this.line.length, [], this.cur);
  }

  left() {
    this.moveTo(this.cur - 1);
  }

  right() {
    this.moveTo(this.cur + 1);
  }

  home() {
    this.moveTo(0);
  }

  end() {
    this.moveTo(this.line.length);
  }

  up() {
    this.recall(this.shown - 1);
  }

  down() {
    this.recall(this.shown + 1);
  }

  /// The whole line, whatever the cursor, with the cursor left after it on the
  /// screen (where the program's output goes on); kept in the history unless it
  /// is empty or the same as the newest entry.
  take(): Uint8Array {
    const line = this.line;
    this.end();
    this.remember(line);
    this.reset();
    return Uint8Array.from(line.flat());
  }

  /// Ctrl-C: the line is dropped, not kept.
  drop() {
    this.end();
    this.reset();
  }

  private reset() {
    this.line = this.draft = [];
    this.cur = 0;
    this.shown = this.history.length;
  }

  private remember(line: Char[]) {
    const newest = this.history.at(-1);
    // Compared by their bytes.
    if (!line.length || (newest && String(newest.flat()) === String(line.flat()))) return;
    if (this.history.push(line) > HISTORY_MAX) this.history.shift();
  }

  /// Shows history entry i. An older entry edited and then left is not changed
  /// (readline would keep the edit until Enter): it is shown as it was.
  private recall(i: number) {
    if (i < 0 || i > this.history.length) return;
    if (this.shown === this.history.length) this.draft = this.line;
    this.shown = i;
    const next = i === this.history.length ? this.draft : this.history[i];
    this.splice(0, this.line.length, next, next.length);
  }

  private moveTo(at: number) {
    if (at < 0 || at > this.line.length) return;
    const bytes = at < this.cur ? back(this.cur - at) : this.line.slice(this.cur, at).flat();
    this.cur = at;
    this.draw(bytes);
  }

  /// Replaces line[from, to) with chars (from is never right of the cursor)
  /// and puts the cursor at `at`: on the screen, the line from `from` on is
  /// printed again.
  private splice(from: number, to: number, chars: Char[], at: number) {
    const shrinks = to - from > chars.length;
    const bytes = back(this.cur - from);
    this.line = [...this.line.slice(0, from), ...chars, ...this.line.slice(to)];
    bytes.push(...this.line.slice(from).flat(), ...(shrinks ? CLEAR_TO_END : []), ...back(this.line.length - at));
    this.cur = at;
    this.draw(bytes);
  }

  private draw(bytes: number[]) {
    if (bytes.length) this.echo(Uint8Array.from(bytes));
  }
}

/// The cursor n columns to the left.
function back(n: number): number[] {
  if (n === 0) return [];
  return n === 1 ? [0x08] : [...enc.encode(`\x1b[${n}D`)];
}
