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

  const EXACT_NEEDS_KERNEL = "exact statistics read every value: they need a live kernel (make lab)";

  /** What "Compute exact" shows offline: the exact statistics recorded at build time, the
   * recorded ones when they already read every value, or the sample with the reason. */
  function exactStats(blob, name) {
    const exact = (blob.exact_stats || {})[name];
    if (exact && !exact.error) return exact;
    const sampled = (blob.stats || {})[name];
    if (!sampled) return null;
    if (sampled.exact || (sampled.count && sampled.count === sampled.total)) return { ...sampled, exact: true };
    return needsKernel(sampled);
  }

  function needsKernel(stats) {
    if (stats.error || stats.note || stats.exact) return stats;
    const sample = stats.sample || "a sample of the values";
    return { ...stats, offline: true, sample: `${sample}; ${EXACT_NEEDS_KERNEL}` };
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
    const args = msg.args || {};
    if (msg.op === "stats") {
      const blob = recordedData().blobs[recordedData().models[widgetModel.model_id]];
      const stats = args.exact ? exactStats(blob, args.name) : (blob.stats || {})[args.name];
      if (stats) {
        setTimeout(() => reply(widgetModel, { type: "res", id: msg.id, ok: true, data: stats }), 0);
        return;
      }
    }
    const forward = (res, buffers) => {
      if (res && res.id === msg.id) {
        model.off("msg:custom", forward);
        if (msg.op === "stats" && args.exact && res.ok && res.data) res = { ...res, data: needsKernel(res.data) };
        reply(widgetModel, res, buffers);
      }
    };
    model.on("msg:custom", forward);
    model.send(msg);
  }

  // The run cell's buttons send actions ({type: "generate"}, ...) that only a kernel can carry
  // out. What a button did on the sample model when the course was built (course/record_runs.py:
  // every result the widget set and every message it sent, timed from the click) is replayed at
  // its recorded pace and marked "recorded on <machine>, <date>"; a button with nothing recorded
  // says, in the cell's own error line, that it needs a live kernel and how to get one.
  const ACTIONS = {
    dequantize: "Dequantize", generate: "Generate", compare: "Compare quantizations",
    compare_backends: "Compare backends", compare_runs: "Compare with…", trace: "Trace",
  };
  const RECORDED = { dequantize: "dequant", generate: "output", compare: "comparison",
    compare_backends: "backends", compare_runs: "runs", trace: "runs" };
  // A replay longer than this is sped up to fit, and says so; a page may set window.meReplaySpeed.
  const LONGEST_REPLAY_S = 30;

  function hasValue(v) {
    if (v === null || v === undefined || v === "") return false;
    if (Array.isArray(v)) return v.length > 0;
    if (typeof v === "object") return Object.keys(v).length > 0;
    return true;
  }

  function runRecord(widgetModel) {
    return (recordedData().runs || {})[widgetModel.model_id] || null;
  }

  /** The reason shown for an action this page cannot run, or null for a message it ignores. */
  function needsKernelText(widgetModel, content) {
    const action = ACTIONS[content.type];
    if (!action) return null;
    const recorded = hasValue(widgetModel.get(RECORDED[content.type]));
    const rec = runRecord(widgetModel);
    const why = rec && (rec.not_recorded || {})[content.type];
    return `${action} runs the model, which needs a live kernel: this page was saved when the course was built` +
      (why ? `, and ${action} was not recorded then (${why})` : "") +
      (recorded ? " (the result below was recorded then)" : "") +
      ". Run it with `make lab` and this notebook in JupyterLab.";
  }

  const replays = new Map(); // widget model -> timers of the replay under way

  function stopReplay(widgetModel) {
    const timers = replays.get(widgetModel);
    if (!timers) return false;
    timers.forEach(clearTimeout);
    replays.delete(widgetModel);
    widgetModel.set({ busy: false, status: "idle", progress: {} });
    widgetModel.trigger("msg:custom", { type: "notice", message: "Stopped (a replay of the recorded run)." }, []);
    return true;
  }

  function recordedAgainst(run) {
    const set = run.events.find((e) => e[1] === "set" && e[2] === "other_source" && e[3]);
    return set ? ` against ${set[3]}` : "";
  }

  /** Play one recorded action back on the model: its traits set and messages sent at their times. */
  function replay(widgetModel, type, rec) {
    const run = rec.actions[type];
    const speed = window.meReplaySpeed || Math.max(1, run.seconds / LONGEST_REPLAY_S);
    const timers = [];
    replays.set(widgetModel, timers);
    for (const [t, kind, a, b] of run.events) {
      timers.push(setTimeout(() => {
        if (kind === "set") widgetModel.set(a, b);
        else widgetModel.trigger("msg:custom", a, []);
      }, (t * 1000) / speed));
    }
    const pace = speed > 1.05 ? `, replayed ${speed.toFixed(speed < 10 ? 1 : 0)}× faster than it ran`
      : ", replayed at its recorded pace";
    const device = run.device ? ` on device ${run.device}` : "";
    const against = type === "compare_runs" ? recordedAgainst(run) : "";
    const mark = `${ACTIONS[type]}${against}${device}: recorded on ${rec.machine}, ${rec.date}` +
      ` (${run.seconds.toFixed(1)} s${pace}); \`make lab\` runs it live`;
    timers.push(setTimeout(() => {
      replays.delete(widgetModel);
      widgetModel.trigger("msg:custom", { type: "notice", message: mark }, []);
      markViews(widgetModel, type, mark);
    }, (run.seconds * 1000) / speed + 20));
  }

  const marks = new Map(); // widget model -> {action: mark}

  /** What the page says under a run cell before any button is pressed: which buttons replay. */
  function introText(widgetModel, rec) {
    const recorded = Object.keys(ACTIONS).filter((a) => (rec.actions || {})[a]).map((a) => ACTIONS[a]);
    const live = Object.keys(ACTIONS).filter((a) => !(rec.actions || {})[a]).map((a) => ACTIONS[a]);
    if (!recorded.length) return `Without a kernel these buttons cannot run the model: \`make lab\` runs them live.`;
    return `Without a kernel, ${recorded.join(", ")} replay the runs recorded on ${rec.machine}, ${rec.date}` +
      (live.length ? `; ${live.join(", ")} need a live kernel` : "") + ". `make lab` runs them live.";
  }

  /** The run cell's intro, and one line per result replayed on this page: where and when it was recorded. */
  function markViews(widgetModel, type, mark) {
    const byAction = marks.get(widgetModel) || {};
    if (type) byAction[type] = mark;
    marks.set(widgetModel, byAction);
    const rec = runRecord(widgetModel);
    for (const promise of Object.values(widgetModel.views || {})) {
      Promise.resolve(promise).then(function draw(view, tries = 40) {
        const root = view && view.el && (view.el.classList.contains("me-rundemo") ? view.el
          : view.el.querySelector(".me-rundemo"));
        if (!root) { // created, not drawn yet
          if (view && tries > 0) setTimeout(() => draw(view, tries - 1), 250);
          return;
        }
        const line = (text, className) => {
          const div = document.createElement("div");
          div.textContent = text;
          div.className = `me-rd-status ${className}`;
          return div;
        };
        // the intro under the status line, where a reader looks before pressing a button;
        // the marks of the results replayed at the bottom, under the results
        if (rec && !root.querySelector(":scope > .me-rd-intro")) {
          const intro = line(introText(widgetModel, rec), "me-rd-intro");
          if (root.firstElementChild) root.firstElementChild.after(intro);
          else root.prepend(intro);
        }
        let box = root.querySelector(":scope > .me-rd-recorded");
        if (!box) {
          box = line("", "me-rd-recorded");
          root.append(box);
        }
        box.replaceChildren(...Object.values(byAction).map((text) => line(text, "me-rd-mark")));
      });
    }
  }

  /** Once the run cell is drawn, say what its buttons do on this page. */
  function introduce(widgetModel, tries = 40) {
    const views = Object.values(widgetModel.views || {});
    if (views.length) markViews(widgetModel, null, null);
    else if (tries > 0) setTimeout(() => introduce(widgetModel, tries - 1), 250);
  }

  /** Handle a run cell action offline: true when it was replayed or stopped. */
  function replayAction(widgetModel, content) {
    if (content.type === "stop") return stopReplay(widgetModel);
    const rec = runRecord(widgetModel);
    if (!ACTIONS[content.type] || !rec || !(rec.actions || {})[content.type]) return false;
    if (replays.has(widgetModel)) {
      widgetModel.trigger("msg:custom", { type: "notice", message: "Still replaying; press Stop or wait." }, []);
      return true;
    }
    replay(widgetModel, content.type, rec);
    return true;
  }

  /** Called by the anywidget wrapper with @jupyter-widgets/base, before any model exists. */
  window.meOfflineInstall = function (base) {
    const proto = base.WidgetModel.prototype;
    if (proto.__meOffline) return;
    const initialize = proto.initialize;
    proto.initialize = function (attributes, options) {
      initialize.call(this, attributes, options);
      if (runRecord(this)) setTimeout(() => introduce(this), 0);
    };
    const send = proto.send;
    proto.send = function (content, callbacks, buffers) {
      if (this.comm === undefined && content && content.type === "req") {
        answer(this, content);
        return;
      }
      if (this.comm === undefined && content && replayAction(this, content)) return;
      const reason = this.comm === undefined && content ? needsKernelText(this, content) : null;
      if (reason) {
        setTimeout(() => this.trigger("msg:custom", { type: "error", message: reason }, []), 0);
        return;
      }
      return send.call(this, content, callbacks, buffers);
    };
    proto.__meOffline = true;
  };
})();
