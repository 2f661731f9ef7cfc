// Requests to the kernel over the widget's custom messages, answered by id.
//
// Every request has a time limit: a kernel that stopped, restarted or lost this widget (a
// notebook reopened from disk) never answers, and a view must then say so, not spin forever.

let nextId = 1;

/** Default time limit; a busy kernel answers widget messages only between cells. */
export const TIMEOUT_MS = 30_000;

/** Why a request got no answer, in words a notebook user can act on. */
export function timeoutMessage(op, ms) {
  return `No answer from the kernel after ${Math.round(ms / 1000)} s (request "${op}"). ` +
    "It may be busy with another cell, or it stopped or restarted since this output was made: " +
    "re-run the cell to reconnect.";
}

/**
 * @param {{send: Function, on: Function, off: Function}} model
 * @param {{timeoutMs?: number}} [options]
 * @returns {{request: (op: string, args?: object, opts?: {timeoutMs?: number}) => Promise<{data: any, buffers: Uint8Array[]}>, close: () => void}}
 */
export function createRpc(model, options = {}) {
  const defaultTimeout = options.timeoutMs ?? TIMEOUT_MS;
  /** @type {Map<number, {resolve: Function, reject: Function}>} */
  const pending = new Map();
  const onMsg = (msg, buffers) => {
    if (!msg || msg.type !== "res" || !pending.has(msg.id)) return;
    const { resolve, reject } = pending.get(msg.id);
    pending.delete(msg.id);
    if (msg.ok) resolve({ data: msg.data, buffers: (buffers || []).map(toBytes) });
    else {
      // The kernel's own words (exception type and message), with its traceback attached.
      const err = new Error(msg.error || "request failed");
      if (msg.trace) err.trace = msg.trace;
      reject(err);
    }
  };
  model.on("msg:custom", onMsg);
  return {
    request(op, args = {}, opts = {}) {
      const id = nextId++;
      const ms = opts.timeoutMs ?? defaultTimeout;
      return new Promise((resolve, reject) => {
        const timer = ms > 0 ? setTimeout(() => {
          if (!pending.has(id)) return;
          pending.delete(id);
          reject(new Error(timeoutMessage(op, ms)));
        }, ms) : null;
        const done = (fn) => (value) => { if (timer) clearTimeout(timer); fn(value); };
        pending.set(id, { resolve: done(resolve), reject: done(reject) });
        try {
          model.send({ type: "req", id, op, args });
        } catch (err) {
          pending.delete(id);
          if (timer) clearTimeout(timer);
          reject(new Error(`Cannot reach the kernel: ${err && err.message}. Re-run the cell to reconnect.`));
        }
      });
    },
    close() {
      model.off("msg:custom", onMsg);
      for (const { reject } of pending.values()) reject(new Error("closed"));
      pending.clear();
    },
  };
}

/** Buffers arrive as DataView, ArrayBuffer or typed arrays depending on the front end. */
export function toBytes(buf) {
  if (buf instanceof Uint8Array) return buf;
  if (buf instanceof ArrayBuffer) return new Uint8Array(buf);
  if (ArrayBuffer.isView(buf)) return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
  return new Uint8Array(0);
}
