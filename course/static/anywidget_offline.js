// "anywidget" on the offline course site: install the kernel-less answering hook on the widget
// base model, then return anywidget's own module unchanged.
define(["@jupyter-widgets/base", "anywidget-upstream"], function (base, upstream) {
  "use strict";
  if (window.meOfflineInstall) window.meOfflineInstall(base);
  return upstream;
});
