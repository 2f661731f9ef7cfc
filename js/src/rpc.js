// Requests to the kernel over the widget's custom messages, answered by id.

let nextId = 1;

/**
 * @param {{send: Function, on: Function, off: Function}} model
 * @returns {{request: (op: string, args?: object) => Promise<{data: any, buffers: Uint8Array[]}>, close: () => void}}
 */
export function createRpc(model) {
  /** @type {Map<number, {resolve: Function, reject: Function}>} */
  const pending = new Map();
  const onMsg = (msg, buffers) => {
    if (!msg || msg.type !== "res" || !pending.has(msg.id)) return;
    const { resolve, reject } = pending.get(msg.id);
    pending.delete(msg.id);
    if (msg.ok) resolve({ data: msg.data, buffers: (buffers || []).map(toBytes) });
    else reject(new Error(msg.error || "request failed"));
  };
  model.on("msg:custom", onMsg);
  return {
    request(op, args = {}) {
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        model.send({ type: "req", id, op, args });
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
