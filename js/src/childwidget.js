// Drawing a widget the kernel created inside one of the Explorer's panels: an anywidget (the
// Run tab's RunDemo) through anywidget's host API, a plain ipywidget (the FixDialog, an
// ipywidgets VBox) through the front end's widget manager, which the model carries.

/**
 * @param {any} model the Explorer's model (anywidget's proxy carries `widget_manager`)
 * @param {any} host anywidget's host API, or undefined
 * @param {string} ref "anywidget:<id>" or "ipywidget:<id>"
 * @param {HTMLElement} el where to draw it
 * @returns {Promise<() => void>} removes the drawn view
 */
export async function renderChild(model, host, ref, el) {
  if (ref.startsWith("anywidget:")) {
    if (!host || typeof host.getWidget !== "function") throw new Error("this front end has no anywidget host API (anywidget 0.11 or newer)");
    const child = await host.getWidget(ref);
    await child.render({ el });
    return () => {};
  }
  const manager = model.widget_manager;
  if (!manager || typeof manager.get_model !== "function" || typeof manager.create_view !== "function") {
    throw new Error("this front end cannot draw an ipywidget inside the Explorer");
  }
  const child = await manager.get_model(ref.replace(/^ipywidget:/, ""));
  const view = await manager.create_view(child, {});
  // A Lumino widget must be attached through Lumino (its children, the Output area among them,
  // are told they are on the page); Widget.attach is a static every widget class inherits.
  const lw = view.luminoWidget || view.pWidget;
  const Lumino = lw && lw.constructor;
  if (Lumino && typeof Lumino.attach === "function") Lumino.attach(lw, el);
  else el.append(view.el);
  return () => {
    try {
      if (Lumino && lw.isAttached && typeof Lumino.detach === "function") Lumino.detach(lw);
      view.remove();
    } catch (_) { /* already gone with its model */ }
  };
}

/**
 * Whether this front end can draw a plain ipywidget inside the Explorer (JupyterLab, Notebook 7,
 * VS Code and Colab carry a widget manager on the model; marimo draws anywidgets only).
 * @param {any} model
 */
export function drawsIpywidgets(model) {
  const manager = model && model.widget_manager;
  return Boolean(manager && typeof manager.get_model === "function" && typeof manager.create_view === "function");
}
