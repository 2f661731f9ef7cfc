// What every view receives: the model, the kernel channel and linked selection.
import { createRpc } from "./rpc.js";

/**
 * @typedef {{tensor?: string|null, file?: string|null, offset?: number|null, length?: number|null, from?: string}} Selection
 * @typedef {{model: any, rpc: ReturnType<typeof createRpc>, select: (s: Selection) => void,
 *   onSelect: (fn: (s: Selection) => void) => () => void, cleanups: Function[]}} Ctx
 * @returns {Ctx}
 */
export function createContext(model) {
  const rpc = createRpc(model);
  const cleanups = [() => rpc.close()];
  return {
    model,
    rpc,
    cleanups,
    select(sel) {
      model.set("selection", { ...sel, at: Date.now() });
      model.save_changes();
    },
    onSelect(fn) {
      const handler = () => fn(model.get("selection") || {});
      model.on("change:selection", handler);
      const off = () => model.off("change:selection", handler);
      cleanups.push(off);
      return off;
    },
  };
}
