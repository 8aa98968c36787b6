// Draw each chart of the page from its Vega-Lite spec (the JSON beside it) with vega-embed, as SVG: crisp on paper.
// The spec carries its language's number format (config.locale); no request leaves the page (actions: false also
// leaves out the link to the online Vega editor).
// The libraries (one file of 898 KB, data-libraries on this script's tag) are asked for only when a chart comes near
// the screen, after the page has loaded: on a phone, starting them up took 1.8 to 2.0 s of the main thread (#60), and
// fetching them first held back the painting of the answer and the tables above the charts (#48). A reader who never
// scrolls to the charts never pays for them; one who prints the page gets them drawn too.
(function () {
  "use strict";
  var libraries = document.currentScript.getAttribute("data-libraries");
  var asked = false;

  function failed(message) {
    document.querySelectorAll(".vega[data-spec]").forEach(function (box) {
      if (!box.hasAttribute("data-drawn")) { box.setAttribute("data-drawn", "no"); }
    });
    console.error(message);
  }

  function drawOne(box) {
    var spec = JSON.parse(document.getElementById(box.getAttribute("data-spec")).textContent);
    return vegaEmbed(box, spec, {actions: false, renderer: "svg"}).then(function () {
      // The box is one image named by the chart's title (role="img"); the drawing inside says nothing more to a
      // screen reader, which reads the data table instead.
      box.querySelectorAll("svg").forEach(function (svg) { svg.setAttribute("aria-hidden", "true"); });
      box.setAttribute("data-drawn", "yes");
    }).catch(function (error) {
      box.setAttribute("data-drawn", "no");
      console.error("chart " + box.getAttribute("data-spec") + " could not be drawn: " + error);
    });
  }

  function drawAll() {
    // One chart per task: the page answers a tap or a scroll between two charts.
    var boxes = Array.prototype.slice.call(document.querySelectorAll(".vega[data-spec]"));
    (function next() {
      var box = boxes.shift();
      if (box) { drawOne(box).then(function () { setTimeout(next, 0); }); }
    })();
  }

  function load() {
    if (asked) { return; }
    asked = true;
    var script = document.createElement("script");
    script.src = libraries;
    script.onload = drawAll;
    script.onerror = function () { failed("the chart libraries could not be loaded from " + libraries); };
    document.head.appendChild(script);
  }

  function watch() {
    var boxes = document.querySelectorAll(".vega[data-spec]");
    if (!boxes.length) { return; }
    if (!("IntersectionObserver" in window)) { load(); return; }
    // A screen's height ahead: the charts are drawn before they are scrolled to, so nothing the reader sees moves.
    var observer = new IntersectionObserver(function (entries) {
      if (entries.some(function (entry) { return entry.isIntersecting; })) {
        observer.disconnect();
        load();
      }
    }, {rootMargin: "100% 0px"});
    boxes.forEach(function (box) { observer.observe(box); });
  }

  window.addEventListener("beforeprint", load);
  if (document.readyState === "complete") {
    watch();
  } else {
    window.addEventListener("load", watch);
  }
})();
