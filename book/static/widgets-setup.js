// Set-up for the kernel-free widgets (sliders, tabs, play buttons) of the static book.
// myst-nb loads it on pages that contain widgets (`nb_ipywidgets_js` in _config.yml), after
// require.js and before the widget manager (widgets/embed-amd.js). All three are served by this
// site from `_static/`; `make book` installs the two third-party ones (tools/vendor_static.py).
(function () {
  // 1. The theme's Font Awesome swaps every <i class="fa ..."> it sees for an <svg>. The Play
  //    widget keeps references to its <i> icons, throws when they vanish and never animates.
  //    Stop Font Awesome from watching the page for new icons (the theme's own icons are
  //    already in the page when it loads).
  window.FontAwesomeConfig = Object.assign(window.FontAwesomeConfig || {}, { observeMutations: false });
  if (window.FontAwesome && window.FontAwesome.config) {
    window.FontAwesome.config.observeMutations = false;
  }
  // 2. Tell require.js that widget modules and the widget manager's files (its fonts) live in
  //    the served `widgets` folder next to this script, not on a CDN; and that the live figures'
  //    module "anywidget" is the served `anywidget/index.js` (tools/vendor_static.py copies it).
  var script = document.currentScript;
  var here = script ? script.src : window.location.href;
  var folder = here.substring(0, here.lastIndexOf("/") + 1);
  var widgets = folder + "widgets";
  window.require.config({
    paths: {
      "@jupyter-widgets/html-manager/dist": widgets,
      "@jupyter-widgets": widgets,
      "anywidget": folder + "anywidget/index",
    },
  });
  // 3. The widgets typeset their labels with MathJax 2's `MathJax.Hub.Queue`; the book serves
  //    MathJax 3, which has no `Hub`, so every label threw "reading 'Queue'". Map the call onto
  //    MathJax 3's `typesetPromise`. MathJax (a deferred script) is loaded before
  //    DOMContentLoaded, and this listener runs before the widget manager renders.
  function addHub() {
    var mj = window.MathJax;
    if (mj && mj.version && !mj.Hub) {
      mj.Hub = {
        Queue: function (job) {
          var element = job && job[2];
          if (element && mj.typesetPromise) {
            mj.typesetPromise([element]).catch(function () {});
          }
        },
      };
    }
  }
  addHub();
  document.addEventListener("DOMContentLoaded", addHub);
})();
