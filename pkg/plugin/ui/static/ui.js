// Brings the first search hit, or else the first gap, of a log page into view.
document.addEventListener("DOMContentLoaded", function () {
  var first = document.querySelector(".log mark") || document.querySelector(".log .gap");
  if (first) first.scrollIntoView({ block: "center" });
});
