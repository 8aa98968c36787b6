// Draw each chart of the page from its Vega-Lite spec (the JSON beside it) with vega-embed, as SVG: crisp on paper.
// The spec carries its language's number format (config.locale); no request leaves the page (actions: false also
// leaves out the link to the online Vega editor).
// The libraries (one file of 898 KB, data-libraries on this script's tag) are asked for once the page has loaded:
// on a phone, fetching them first held back the painting of the answer and the tables above the charts (#48).
(function () {
  "use strict";
  var libraries = document.currentScript.getAttribute("data-libraries");

  function draw() {
    document.querySelectorAll(".vega[data-spec]").forEach(function (box) {
      var spec = JSON.parse(document.getElementById(box.getAttribute("data-spec")).textContent);
      vegaEmbed(box, spec, {actions: false, renderer: "svg"}).then(function () {
        // The box is one image named by the chart's title (role="img"); the drawing inside says nothing more to a
        // screen reader, which reads the data table instead.
        box.querySelectorAll("svg").forEach(function (svg) { svg.setAttribute("aria-hidden", "true"); });
        box.setAttribute("data-drawn", "yes");
      }).catch(function (error) {
        box.setAttribute("data-drawn", "no");
        console.error("chart " + box.getAttribute("data-spec") + " could not be drawn: " + error);
      });
    });
  }

  function load() {
    var script = document.createElement("script");
    script.src = libraries;
    script.onload = draw;
    script.onerror = function () {
      document.querySelectorAll(".vega[data-spec]").forEach(function (box) { box.setAttribute("data-drawn", "no"); });
      console.error("the chart libraries could not be loaded from " + libraries);
    };
    document.head.appendChild(script);
  }

  if (document.readyState === "complete") {
    load();
  } else {
    window.addEventListener("load", load);
  }
})();
