// retrace explain -html: rows open their attributes (click, Enter, Space);
// the checkbox switches the lanes between configured time and wall time.
(function () {
  "use strict";
  function rowOf(el) {
    return el && el.closest ? el.closest(".row[data-span]") : null;
  }
  function toggle(row) {
    var details = document.getElementById(row.getAttribute("aria-controls"));
    if (!details) {
      return;
    }
    var open = row.getAttribute("aria-expanded") !== "true";
    row.setAttribute("aria-expanded", open ? "true" : "false");
    details.hidden = !open;
  }
  document.addEventListener("click", function (e) {
    var row = rowOf(e.target);
    if (row) {
      toggle(row);
    }
  });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Enter" && e.key !== " ") {
      return;
    }
    var row = rowOf(e.target);
    if (row && row === e.target) {
      e.preventDefault();
      toggle(row);
    }
  });
  var timebase = document.getElementById("timebase");
  function apply() {
    document.body.classList.toggle("wall", !timebase.checked);
  }
  timebase.addEventListener("change", apply);
  apply();
})();
