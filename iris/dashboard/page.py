"""The dashboard's single HTML page (inline CSS and JavaScript). Not the data: it only renders
what the JSON API returns. Kept in a Python string so it ships inside the wheel with no
package-data configuration and no build step.

Routes are URL fragments (#/jobs, #/job/<id>, #/workers, #/capacity, #/actors, #/scheduler,
#/usage, #/figures); the visible page refreshes every 2 s. A `?token=T` in the address is moved to sessionStorage
and sent as a Bearer header, so it does not linger in the address bar or in history.
"""

from iris.dashboard.page_figures import FIGURES_JS
from iris.dashboard.page_inspect import INSPECT_CSS, INSPECT_JS
from iris.dashboard.page_job import JOB_JS

PAGE_HTML = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Iris</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;color:#222}
nav{background:#23395d;padding:8px 16px}nav a{color:#fff;margin-right:18px;text-decoration:none}
nav a.on{font-weight:bold;text-decoration:underline}
main{padding:12px 16px}table{border-collapse:collapse;margin:8px 0;min-width:60%}
th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f8}th.sort{cursor:pointer}.muted{color:#777}
.state{padding:1px 6px;border-radius:8px;background:#eee}
.running{background:#cde9ff}.pending,.building,.assigned{background:#fff2c2}
.succeeded{background:#d4f5d4}.failed,.worker_failed,.unschedulable,.preempted{background:#ffd2d2}
.killed{background:#e3d7f5}.READY,.create{background:#d4f5d4}.CREATING{background:#fff2c2}
.PREEMPTED,.FAILED,.create_failed,.delete_failed{background:#ffd2d2}.DELETING,.delete,.cooldown{background:#e3d7f5}.healthy{background:#d4f5d4}.late{background:#ffd2d2}pre{background:#111;color:#ddd;padding:8px;max-height:420px;overflow:auto}
#error{color:#b00}button{padding:4px 12px}.group{margin-top:14px}
.time,td.time{white-space:nowrap}.bad{color:#b00}code{background:#f3f5f8;padding:1px 4px}
table.kv{min-width:0}#job-command code{white-space:pre-wrap}table.kv th{width:130px;background:none;font-weight:600}
.empty{border:1px dashed #bbb;border-radius:6px;padding:14px 18px;color:#555;max-width:760px;line-height:1.5}
.empty b{color:#222}#charts{display:flex;gap:28px;margin:4px 0 10px;flex-wrap:wrap}
.chart{border:1px solid #e3e6ea;border-radius:6px;padding:6px 10px}.chart .v{font-size:20px;font-weight:600}
.chart svg{display:block}.chart polyline{fill:none;stroke:#23395d;stroke-width:1.5}
#log-controls{display:flex;gap:14px;align-items:center;flex-wrap:wrap;margin-bottom:4px}
pre#log-tail{white-space:pre-wrap;word-break:break-all;min-height:60px}
.ln.stderr{color:#ffb3b3}.ln.build{color:#9fd3ff}.lt{color:#8a8}.lp{color:#999}
.tl-row{display:flex;align-items:center;gap:10px;margin:3px 0}.tl-label{width:110px;white-space:nowrap}
.tl-track{position:relative;flex:0 0 45%;height:14px;background:#f3f5f8;border-radius:3px}
.tl-wait,.tl-run{position:absolute;top:0;height:14px;border-radius:3px;min-width:2px}.tl-wait{background:#fff2c2}
.tl-run{background:#7bb8e8}.tl-run.succeeded{background:#7cc47c}.tl-run.failed,.tl-run.worker_failed,.tl-run.preempted{background:#e88}
.tl-run.killed{background:#b9a3dd}.tl-note{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.tl-scale{display:flex;justify-content:space-between;margin-left:120px;width:45%;font-size:12px}
/*INSPECT_CSS*/</style></head><body>
<nav><a id="nav-jobs" href="#/jobs">Jobs</a><a id="nav-workers" href="#/workers">Workers</a>
<a id="nav-scheduler" href="#/scheduler">Scheduler</a><a id="nav-capacity" href="#/capacity">Capacity</a>
<a id="nav-actors" href="#/actors">Actors</a><a id="nav-usage" href="#/usage">Usage</a><a id="nav-figures" href="#/figures">Figures</a><a href="/metrics">Metrics</a></nav>
<main><div id="error"></div><div id="controls"></div><div id="content">loading…</div></main>
<script>
"use strict";
(function keepToken(){const u=new URL(location.href);const t=u.searchParams.get("token");
 if(t){sessionStorage.setItem("iris-token",t);u.searchParams.delete("token");history.replaceState(null,"",u);}})();
const TOKEN=sessionStorage.getItem("iris-token");
function headers(extra){const h=Object.assign({},extra||{});if(TOKEN)h.Authorization="Bearer "+TOKEN;return h;}
async function api(path,opts){const r=await fetch(path,Object.assign({headers:headers()},opts||{}));
 const body=await r.json().catch(()=>({error:{message:r.statusText}}));
 if(!r.ok)throw new Error((body.error&&body.error.message)||r.statusText);return body;}
function esc(v){return String(v==null?"":v).replace(/[&<>"']/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;","'":"&#39;"}[c]));}
const p2=n=>String(n).padStart(2,"0");
function when(ts){if(!ts)return "";const d=new Date(ts*1000);
 return `<span class="time" title="${esc(d.toISOString())}">${d.getFullYear()}-${p2(d.getMonth()+1)}-${p2(d.getDate())} ${p2(d.getHours())}:${p2(d.getMinutes())}:${p2(d.getSeconds())}</span>`;}
function st(s){return `<span class="state ${esc(s)}">${esc(s)}</span>`;}
function counts(c){return Object.entries(c||{}).map(([k,v])=>`<span class="time">${esc(k)}: ${v}</span>`).join(", ");}
function reason(r){return r?`${esc(r.code)}: ${esc(r.message)}`:"";}
function table(id,cols,rows,rowClass){return `<table id="${id}"><tr>${cols.map(c=>`<th>${c}</th>`).join("")}</tr>`+
 rows.map(r=>`<tr class="${rowClass}">${r.map(v=>`<td>${v}</td>`).join("")}</tr>`).join("")+"</table>";}
const $=id=>document.getElementById(id);
let jobsQuery={state:"",user:"",prefix:"",sort:"submitted",order:"desc",page:1,per_page:50};
let shownRoute=null;

function jobsControls(){
 $("controls").innerHTML=`<form id="filters">State <select id="f-state"><option value="">any</option>`+
  ["pending","building","running","succeeded","failed","killed","worker_failed","unschedulable"]
  .map(s=>`<option ${jobsQuery.state===s?"selected":""}>${s}</option>`).join("")+
  `</select> User <input id="f-user" size="10" value="${esc(jobsQuery.user)}">
  Name prefix <input id="f-prefix" size="20" value="${esc(jobsQuery.prefix)}">
  <button id="f-apply">Filter</button></form>`;
 $("filters").onsubmit=e=>{e.preventDefault();Object.assign(jobsQuery,{state:$("f-state").value,
  user:$("f-user").value.trim(),prefix:$("f-prefix").value.trim(),page:1});refresh();};
}
async function jobsPage(){
 const q=new URLSearchParams(Object.entries(jobsQuery).filter(([,v])=>v!==""));
 const d=await api("/api/jobs?"+q);
 const pages=Math.max(1,Math.ceil(d.total/d.per_page));
 const sortable=[["name","Job"],["user","User"],["state","State"],["priority","Priority"],["submitted","Submitted"],["finished","Finished"]];
 const head=sortable.map(([k,l])=>`<th class="sort" data-sort="${k}">${l}${jobsQuery.sort===k?(jobsQuery.order==="desc"?" ▼":" ▲"):""}</th>`).join("");
 const rows=d.jobs.map(j=>`<tr class="job-row"><td><a class="job-link" href="#/job/${encodeURIComponent(j.job_id)}">${esc(j.job_id)}</a></td>
  <td>${esc(j.user)}</td><td>${st(j.state)}</td><td>${esc(j.priority)}</td><td>${when(j.submitted_at)}</td>
  <td>${when(j.finished_at)}</td><td>${counts(j.task_counts)}</td><td class="muted">${reason(j.pending_reason)||esc(j.error)}</td></tr>`).join("");
 const charts=await chartsStrip();
 if(!d.total&&!jobsQuery.state&&!jobsQuery.user&&!jobsQuery.prefix){$("content").innerHTML=charts+`<div class="empty" id="jobs-empty">
  <b>No jobs yet.</b> Run one from a shell with <code>iris job run -- python -c 'print(42)'</code>,
  or from Python with <code>iris.submit(fn)</code>. It shows up here with its state, tasks and logs.</div>`;return;}
 $("content").innerHTML=charts+`<div id="jobs-total">${d.total} jobs — page ${d.page} of ${pages}
  <button id="prev" ${d.page<=1?"disabled":""}>‹ prev</button> <button id="next" ${d.page>=pages?"disabled":""}>next ›</button></div>
  <table id="jobs"><tr>${head}<th>Tasks</th><th>Why pending / error</th></tr>${rows}</table>`;
 document.querySelectorAll("th.sort").forEach(th=>th.onclick=()=>{const k=th.dataset.sort;
  jobsQuery.order=(jobsQuery.sort===k&&jobsQuery.order==="desc")?"asc":"desc";jobsQuery.sort=k;refresh();});
 $("prev").onclick=()=>{jobsQuery.page--;refresh();};$("next").onclick=()=>{jobsQuery.page++;refresh();};
}
function spark(points,key){if(points.length<2)return '<svg width="240" height="40"></svg>';
 const max=Math.max(1,...points.map(p=>p[key])),t0=points[0].at,span=Math.max(1,points[points.length-1].at-t0);
 const xy=points.map(p=>`${(240*(p.at-t0)/span).toFixed(1)},${(38-36*p[key]/max).toFixed(1)}`).join(" ");
 return `<svg width="240" height="40" viewBox="0 0 240 40"><polyline points="${xy}"/></svg>`;}
async function chartsStrip(){let h;try{h=await api("/api/history");}catch(e){return "";}
 const pts=h.points,last=pts.length?pts[pts.length-1]:{running_tasks:0,chips_in_use:0};
 const one=(id,label,key)=>`<div class="chart" id="${id}"><div class="muted">${label} · last hour</div>
  <div class="v">${last[key]}</div>${spark(pts,key)}<div class="muted" style="font-size:12px">peak ${Math.max(0,...pts.map(p=>p[key]))}${pts.length<2?" · collecting (a point every "+h.every_s+" s)":""}</div></div>`;
 return `<div id="charts">${one("chart-running","Running tasks","running_tasks")}${one("chart-chips","Chips in use","chips_in_use")}</div>`;}
async function workersPage(){
 const d=await api("/api/workers");
 $("content").innerHTML=(d.groups.length?"":`<div class="empty" id="workers-empty"><b>No workers have registered.</b>
  Jobs wait until one does. On this machine: <code>iris cluster start --local --workers 2</code>; on a host:
  <code>iris worker --controller ADDR</code>.</div>`)+d.groups.map(g=>
  `<div class="group"><h3>region ${esc(g.region)} · zone ${esc(g.zone)} · scale group ${esc(g.scale_group)}</h3>`+
  table("workers",["Worker","Health","CPU","Memory","Accelerators","Last heard","Running attempts"],g.workers.map(w=>[
   esc(w.worker_id),`<span class="state ${esc(w.health)}" title="${esc(w.health_rule||"")}">${esc(w.health)}</span>`,w.cpu,human(w.memory_bytes),w.accelerators,`<span class="time">${dur(w.last_heard_s_ago)} ago</span>`,
   w.running.map(a=>a.job_id?`<a href="#/job/${encodeURIComponent(a.job_id)}">${esc(a.job_id)}</a>[${a.task_index}] ${st(a.state)}`:esc(a.attempt_id)).join("<br>")]),
   "worker-row")+"</div>").join("");
}
async function schedulerPage(){
 const d=await api("/api/scheduler");
 if(!d.pending_tasks&&d.bands.every(b=>!b.jobs.length)){$("content").innerHTML=`<div class="empty" id="scheduler-empty">
  <b>Nothing is waiting.</b> Every task that was submitted has been placed; jobs that wait for room show up here by priority band, with why.</div>`;return;}
 $("content").innerHTML=`<p>${d.pending_tasks} tasks pending</p>`+d.bands.map(b=>`<div class="group"><h3>${esc(b.priority)} (${b.jobs.length} jobs)</h3>`+
  table("band-"+b.priority,["Job","User","Pending tasks","Submitted","Why pending"],b.jobs.map(j=>[
   `<a href="#/job/${encodeURIComponent(j.job_id)}">${esc(j.job_id)}</a>`,esc(j.user),j.pending_tasks,when(j.submitted_at),
   reason(j.pending_reason)||'<span class="muted">not tried yet</span>']),"pending-row")+"</div>").join("");
}
async function usagePage(){
 const d=await api("/api/usage");
 const hours=h=>h==null?'<span class="muted">unlimited</span>':Number(h).toFixed(1);
 $("content").innerHTML=(d.usage.length?table("usage",["User","Accelerator-hours (7 days)","Budget","Groups","Over budget"],
  d.usage.map(u=>[esc(u.user),Number(u.used_hours).toFixed(1),hours(u.budget_hours),esc(u.groups.join(", ")),
   u.over_budget?`<b>${esc(u.over_budget)}</b>: scheduled as batch`:""]),"usage-row"):
  `<div class="empty" id="usage-empty"><b>No accelerator use in the last 7 days.</b> Chips (or GPUs) times run time of every attempt count here.</div>`)+
  (d.budgets.length?`<h3>Budgets</h3>`+table("budgets",["Subject","Hours","Window","Max priority","Members","Used"],d.budgets.map(b=>[
   esc(b.subject),hours(b.hours),b.window_days+" days",esc(b.max_priority||"any"),esc(b.members.join(", ")),Number(b.used_hours).toFixed(1)]),"budget-row"):"");
}
function dur(x){if(x==null)return "";x=Number(x);return x<10?x.toFixed(1)+" s":x<120?x.toFixed(0)+" s":x<7200?(x/60).toFixed(0)+" min":(x/3600).toFixed(1)+" h";}
function scaleGroup(g,gi){const c=g.counts||{};
 return `<div class="group scale-group"><h3>${esc(g.group)} <span class="muted">· ${esc(g.accelerator)} · min ${g.min} · max ${g.max} · buffer ${g.buffer}</span></h3>
  <p class="slice-counts">ready <b>${c.ready||0}</b> · booting <b>${c.booting||0}</b> · preempted <b>${c.preempted||0}</b>`+
  (c.failed?` · failed <b>${c.failed}</b>`:"")+(c.deleting?` · deleting <b>${c.deleting}</b>`:"")+
  (g.cooldown_s>0?` · <span class="late state">churn cooldown ${dur(g.cooldown_s)}</span>`:"")+
  (g.held?` · <span class="muted">held: ${esc(g.held)}</span>`:"")+`</p>`+
  (g.slices.length?table("slices-"+gi,["Slice","Zone","State","Hosts","Busy","Age"],g.slices.map(s=>[esc(s.slice_id),esc(s.zone),
   st(s.state)+(s.deleting?' <span class="muted">deleting</span>':""),s.hosts,s.busy,dur(s.age_s)]),"slice-row"):'<p class="muted">No slices.</p>')+
  (Object.keys(g.backoff||{}).length?table("backoff-"+gi,["Zone backing off","Retry in","Reason"],Object.entries(g.backoff).map(([z,b])=>
   [esc(z),dur(Math.max(0,b.until_s)),esc(b.reason)]),"backoff-row"):"")+"</div>";}
async function capacityPage(){
 const d=await api("/api/capacity");
 if(!d.autoscaler){
  $("content").innerHTML=`<div class="empty"><p id="capacity-note" style="margin:0">${esc(d.note)}</p></div>`+(d.configured?
   table("scale-groups",["Scale group","Region","Accelerator","Zones","Min","Max","Buffer"],
    d.scale_groups.map(g=>[esc(g.name),esc(g.region),esc(g.accelerator_variant||g.accelerator_type),esc((g.zones||[]).join(", ")),
    g.min_slices,g.max_slices,g.buffer_slices]),"group-row"):"");
  return;
 }
 let gi=0;
 $("content").innerHTML=(d.regions.length?"":'<p id="capacity-note">The autoscaler reports no regions yet.</p>')+d.regions.map((r,ri)=>
  `<div class="group region"><h2>Region ${esc(r.region)}</h2>`+(r.groups.length?r.groups.map(g=>scaleGroup(g,gi++)).join(""):'<p class="muted">No scale groups.</p>')+
  `<h3>Recent autoscaler decisions <span class="muted">(newest first)</span></h3>`+(r.decisions.length?
   table("decisions-"+ri,["When","Action","Group","Slice","Zone","Reason"],r.decisions.map(x=>[x.ago_s!=null?dur(x.ago_s)+" ago":"",
    st(x.action),esc(x.group),esc(x.slice_id),esc(x.zone),esc(x.reason)]),"decision-row"):'<p class="muted">No decisions yet.</p>')+"</div>").join("");
}
let showInternal=false;
async function actorsPage(){
 const d=await api("/api/actors");
 const shown=d.actors.filter(a=>showInternal||!a.internal),hidden=d.actors.length-shown.length;
 $("content").innerHTML=`<p><label><input type="checkbox" id="show-internal" ${showInternal?"checked":""}> show Iris's own actors</label>
  <span class="muted">${hidden?hidden+" hidden":""}</span></p>`+(shown.length?table("actors",["Name","Namespace","Host","Address","Registered"],
  shown.map(a=>[esc(a.name)+(a.internal?' <span class="muted">(Iris)</span>':""),esc(a.namespace),esc(a.host),esc(a.address),when(a.registered_at)]),"actor-row"):
  `<div class="empty" id="actors-empty"><b>No actors yet.</b> An actor appears here when a job or client hosts one:
   <code>Trainer.serve("trainer")</code> or <code>iris.spawn(Trainer, name="trainer")</code>.</div>`);
 $("show-internal").onchange=e=>{showInternal=e.target.checked;refresh();};
}
async function refresh(){
 const route=location.hash.replace(/^#/,"")||"/jobs";
 const nav=route.split("/")[1];
 document.querySelectorAll("nav a").forEach(a=>a.classList.toggle("on",a.id==="nav-"+nav||(nav==="job"&&a.id==="nav-jobs")));
 if(route!==shownRoute){shownRoute=route;$("controls").innerHTML="";if(route==="/jobs")jobsControls();}
 try{
  if(route.startsWith("/job/"))await jobPage(decodeURIComponent(route.slice(5)));
  else await ({"/workers":workersPage,"/scheduler":schedulerPage,"/capacity":capacityPage,
   "/actors":actorsPage,"/usage":usagePage,"/figures":figuresPage}[route]||jobsPage)();
  $("error").textContent="";document.title="Iris · "+(nav||"jobs");
 }catch(e){$("error").textContent=e.message;}
}
/*JOB_JS*/
/*INSPECT_JS*/
/*FIGURES_JS*/
window.addEventListener("hashchange",refresh);
refresh();setInterval(()=>{if(!document.hidden)refresh();},2000);
</script></body></html>
""".replace("/*JOB_JS*/", JOB_JS).replace("/*FIGURES_JS*/", FIGURES_JS).replace(
    "/*INSPECT_JS*/", INSPECT_JS).replace("/*INSPECT_CSS*/", INSPECT_CSS)
