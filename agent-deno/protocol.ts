// The agent protocol of core/protocol.hpp, Deno side: frames are
// u32 BE payload length | u8 type | u32 BE channel | payload.

export const VERSION = 2;
export const HEADER = 9;
export const MAX_PAYLOAD = 1 << 20;
export const CHUNK = 64 * 1024;

export const T = {
  exec: 0x01,
  stdin_data: 0x02,
  stdin_eof: 0x03,
  signal: 0x04,
  file_read: 0x05,
  file_write: 0x06,
  list: 0x07,
  ping: 0x08,
  resize: 0x09,
  proc_list: 0x0a,
  proc_attach: 0x0b,
  proc_signal: 0x0c,
  connect: 0x0d,
  started: 0x81,
  stdout_data: 0x82,
  stderr_data: 0x83,
  exit: 0x84,
  data: 0x85,
  end: 0x86,
  ok: 0x87,
  error: 0x88,
  entries: 0x89,
} as const;

const KNOWN = new Set<number>(Object.values(T));

export interface Frame {
  type: number;
  channel: number;
  payload: Uint8Array;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export function encode(type: number, channel: number, payload: Uint8Array = new Uint8Array()): Uint8Array {
  if (payload.length > MAX_PAYLOAD) throw new Error(`frame payload of ${payload.length} bytes is over the limit`);
  const out = new Uint8Array(HEADER + payload.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, payload.length);
  v.setUint8(4, type);
  v.setUint32(5, channel);
  out.set(payload, HEADER);
  return out;
}

export function encodeJson(type: number, channel: number, body: unknown): Uint8Array {
  return encode(type, channel, enc.encode(JSON.stringify(body)));
}

/// Raw bytes as frames of at most CHUNK bytes each.
export function* chunks(type: number, channel: number, bytes: Uint8Array): Generator<Uint8Array> {
  for (let off = 0; off < bytes.length; off += CHUNK) yield encode(type, channel, bytes.subarray(off, off + CHUNK));
}

/// The error frame; `code` is one of core/error.hpp's code names.
export function encodeError(channel: number, code: string, message: string): Uint8Array {
  return encodeJson(T.error, channel, { code, errno: 0, message });
}

export function parseJson(f: Frame): Record<string, unknown> {
  const v = JSON.parse(dec.decode(f.payload));
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new ProtoError("protocol", "frame body is not a JSON object");
  return v as Record<string, unknown>;
}

/// An error with one of the host's error codes (not_found, conflict, ...).
export class ProtoError extends Error {
  constructor(public code: string, message: string) {
    super(message);
  }
}

/// Incremental decoder: feed bytes as they arrive, pop whole frames.
export class Decoder {
  private buf = new Uint8Array(0);
  private len = 0;

  feed(bytes: Uint8Array) {
    if (this.len + bytes.length > this.buf.length) {
      const grown = new Uint8Array(Math.max(this.buf.length * 2, this.len + bytes.length, 65536));
      grown.set(this.buf.subarray(0, this.len));
      this.buf = grown;
    }
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
  }

  pop(): Frame | null {
    if (this.len < HEADER) return null;
    const v = new DataView(this.buf.buffer, this.buf.byteOffset, this.len);
    const n = v.getUint32(0);
    const type = v.getUint8(4);
    if (n > MAX_PAYLOAD) throw new ProtoError("protocol", "oversized frame");
    if (!KNOWN.has(type)) throw new ProtoError("protocol", `unknown frame type ${type}`);
    if (this.len < HEADER + n) return null;
    const f = { type, channel: v.getUint32(5), payload: this.buf.slice(HEADER, HEADER + n) };
    this.buf.copyWithin(0, HEADER + n, this.len);
    this.len -= HEADER + n;
    return f;
  }
}
