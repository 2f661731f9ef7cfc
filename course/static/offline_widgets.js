// The course site, offline: widgets render from the state saved in the page, and the requests
// they would send to a kernel (pages of bytes, tree rows, step-through, statistics) are answered
// from data recorded when the notebook ran. Every module loads from _static/, never a CDN.
(function () {
  "use strict";
  // "anywidget" resolves to a local wrapper that installs the answering hook, then hands over
  // to anywidget's own AMD build (copied from the Python package, so the versions match).
  window.requirejs.config({
    paths: {
      anywidget: "_static/anywidget_offline",
      "anywidget-upstream": "_static/anywidget/index",
    },
  });

  let recorded = null;
  function recordedData() {
    if (recorded === null) {
      const el = document.getElementById("me-offline-data");
      try {
        recorded = JSON.parse((el && el.textContent) || "{}");
      } catch (err) {
        recorded = {};
      }
    }
    return recorded;
  }

  const staticModels = new Map();

  // The answering model for one widget: the Explorer's own static model over the recorded data.
  function staticModelFor(modelId) {
    if (staticModels.has(modelId)) return staticModels.get(modelId);
    const data = recordedData();
    const blob = (data.blobs || [])[(data.models || {})[modelId]];
    let model = null;
    if (blob && window.meStaticModel) model = window.meStaticModel.createStaticModel(blob);
    staticModels.set(modelId, model);
    return model;
  }

  function reply(widgetModel, res, buffers) {
    widgetModel.trigger("msg:custom", res, buffers || []);
  }

  /** Answer one request {type: "req", id, op, args} without a kernel. */
  function answer(widgetModel, msg) {
    const fail = (error) => reply(widgetModel, { type: "res", id: msg.id, ok: false, error });
    const model = staticModelFor(widgetModel.model_id);
    if (!model) {
      fail("This page was saved without a kernel; run the notebook in Jupyter to explore further.");
      return;
    }
    if (msg.op === "stats") {
      const blob = recordedData().blobs[recordedData().models[widgetModel.model_id]];
      const stats = (blob.stats || {})[(msg.args || {}).name];
      if (stats && !(msg.args || {}).exact) {
        setTimeout(() => reply(widgetModel, { type: "res", id: msg.id, ok: true, data: stats }), 0);
        return;
      }
    }
    const forward = (res, buffers) => {
      if (res && res.id === msg.id) {
        model.off("msg:custom", forward);
        reply(widgetModel, res, buffers);
      }
    };
    model.on("msg:custom", forward);
    model.send(msg);
  }

  /** Called by the anywidget wrapper with @jupyter-widgets/base, before any model exists. */
  window.meOfflineInstall = function (base) {
    const proto = base.WidgetModel.prototype;
    if (proto.__meOffline) return;
    const send = proto.send;
    proto.send = function (content, callbacks, buffers) {
      if (this.comm === undefined && content && content.type === "req") {
        answer(this, content);
        return;
      }
      return send.call(this, content, callbacks, buffers);
    };
    proto.__meOffline = true;
  };
})();
