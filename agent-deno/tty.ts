// A terminal for `sbx exec -t` in a deno sandbox. There is no kernel here, so
// no line discipline between the user's raw terminal and the program: this is
// one, the canonical mode of a Unix tty in small. Typed characters are echoed
// and gathered into a line that the program reads once Enter comes; Backspace
// and Ctrl-U edit it; Ctrl-C interrupts (and drops the line); Ctrl-D on an
// empty line is one end of input (a read returning 0), elsewhere it hands
// over the line so far. Escape sequences (arrow keys) are swallowed rather
// than typed into the line. Output has "\n" turned into "\r\n" (ONLCR).

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
const CTRL_C = 0x03, CTRL_D = 0x04, BS = 0x08, TAB = 0x09, LF = 0x0a, CR = 0x0d, CTRL_U = 0x15, ESC = 0x1b, DEL = 0x7f;
// Tab indents a Python block as four spaces: one erasable column each.
const TAB_AS = enc.encode("    ");

export class LineDiscipline {
  private buf: number[] = [];
  // 0: plain; 1: after ESC; 2: inside a CSI/SS3 sequence (until its final byte).
  private esc = 0;

  constructor(private ports: TtyPorts) {}

  feed(bytes: Uint8Array) {
    for (const b of bytes) this.byte(b);
  }

  private byte(b: number) {
    if (this.esc === 1) return void (this.esc = b === 0x5b || b === 0x4f ? 2 : 0);
    if (this.esc === 2) return void (b >= 0x40 && b <= 0x7e && (this.esc = 0));
    switch (b) {
      case ESC:
        this.esc = 1;
        return;
      case CR:
      case LF:
        this.buf.push(LF);
        this.ports.echo(Uint8Array.of(LF)); // "\r\n" once it is output (onlcr)
        return this.handOver();
      case CTRL_C:
        this.buf = [];
        this.ports.echo(enc.encode("^C"));
        return this.ports.interrupt();
      case CTRL_D:
        if (this.buf.length === 0) return this.ports.eof();
        return this.handOver();
      case DEL:
      case BS:
        return this.erase(1);
      case CTRL_U:
        return this.erase(this.buf.length);
      case TAB:
        this.buf.push(...TAB_AS);
        return this.ports.echo(TAB_AS);
    }
    if (b < 0x20) return; // other control characters mean nothing here
    this.buf.push(b);
    this.ports.echo(Uint8Array.of(b));
  }

  /// Erases up to n characters (a UTF-8 sequence is one), as "\b \b" each.
  private erase(n: number) {
    let chars = 0;
    while (chars < n && this.buf.length) {
      while (this.buf.length && (this.buf.pop()! & 0xc0) === 0x80) {
        // continuation bytes of the character being erased
      }
      chars++;
    }
    if (chars) this.ports.echo(enc.encode("\b \b".repeat(chars)));
  }

  private handOver() {
    const line = Uint8Array.from(this.buf);
    this.buf = [];
    this.ports.line(line);
  }
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
