"""The dashboard's single HTML page (inline CSS and JavaScript). Not the data: it only renders
what the JSON API returns. Kept in a Python string so it ships inside the wheel with no
package-data configuration and no build step.

Routes are URL fragments (#/jobs, #/job/<id>, #/workers, #/capacity, #/actors, #/scheduler);
the visible page refreshes every 2 s. A `?token=T` in the address is moved to sessionStorage
and sent as a Bearer header, so it does not linger in the address bar or in history.
"""

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
</style></head><body>
<nav><a id="nav-jobs" href="#/jobs">Jobs</a><a id="nav-workers" href="#/workers">Workers</a>
<a id="nav-scheduler" href="#/scheduler">Scheduler</a><a id="nav-capacity" href="#/capacity">Capacity</a>
<a id="nav-actors" href="#/actors">Actors</a><a href="/metrics">Metrics</a></nav>
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
function when(ts){return ts?new Date(ts*1000).toLocaleString():"";}
function st(s){return `<span class="state ${esc(s)}">${esc(s)}</span>`;}
function counts(c){return Object.entries(c||{}).map(([k,v])=>`${esc(k)}: ${v}`).join(", ");}
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
 $("content").innerHTML=`<div id="jobs-total">${d.total} jobs — page ${d.page} of ${pages}
  <button id="prev" ${d.page<=1?"disabled":""}>‹ prev</button> <button id="next" ${d.page>=pages?"disabled":""}>next ›</button></div>
  <table id="jobs"><tr>${head}<th>Tasks</th><th>Why pending / error</th></tr>${rows}</table>`;
 document.querySelectorAll("th.sort").forEach(th=>th.onclick=()=>{const k=th.dataset.sort;
  jobsQuery.order=(jobsQuery.sort===k&&jobsQuery.order==="desc")?"asc":"desc";jobsQuery.sort=k;refresh();});
 $("prev").onclick=()=>{jobsQuery.page--;refresh();};$("next").onclick=()=>{jobsQuery.page++;refresh();};
}
// The log tail is read from the log store (GCS in production): fetched when a job opens, then
// every 10 s while it is live and once more when it ends, not on every 2 s refresh.
let logCache={id:null,at:0,live:true,data:null};
async function logTail(id,live){
 const c=logCache,fresh=c.id===id&&(c.live?Date.now()-c.at<10000:true)&&c.live===live;
 if(fresh)return c.data;
 const data=await api("/api/job/logs?tail=200&id="+encodeURIComponent(id)).catch(e=>({lines:[],error:e.message}));
 logCache={id,at:Date.now(),live,data};return data;
}
async function jobPage(id){
 const j=await api("/api/job?id="+encodeURIComponent(id));
 const live=["pending","building","running"].includes(j.state);
 const logs=await logTail(id,live);
 const attempts=t=>t.attempt_list.map(a=>`#${a.number} ${st(a.state)} on ${esc(a.worker_id)}`+
  (a.exit_code!=null?` exit ${a.exit_code}`:"")+(a.error?` <span class="muted">${esc(a.error)}</span>`:"")).join("<br>");
 $("content").innerHTML=`<h2 id="job-title">${esc(j.job_id)}</h2>
  <p>State <span id="job-state">${st(j.state)}</span> · user ${esc(j.user)} · priority ${esc(j.priority)}
  · submitted ${when(j.submitted_at)} ${j.finished_at?"· finished "+when(j.finished_at):""}
  ${live?'<button id="kill-button">Kill job</button>':""}</p>
  ${j.error?`<p id="job-error">Error: ${esc(j.error)}</p>`:""}
  ${j.pending_reason?`<p id="pending-reason">Why pending: ${reason(j.pending_reason)}</p>`:""}
  <h3>Tasks</h3>`+table("tasks",["Task","State","Attempts (worker, exit code)","Error"],
  j.tasks.map(t=>[t.index,st(t.state),attempts(t),esc(t.error)]),"task-row")+
  `<h3>Log tail</h3><pre id="log-tail">${logs.error?esc("logs unavailable: "+logs.error):
  logs.lines.map(l=>esc(`[${l.task}.${l.attempt} ${l.stream}] ${l.text}`)).join("\n")||"(no output yet)"}</pre>`;
 if(live)$("kill-button").onclick=async()=>{if(!confirm("Kill "+id+"?"))return;
  try{await api("/api/job/kill",{method:"POST",headers:headers({"X-Iris-Dashboard":"1","Content-Type":"application/json"}),
   body:JSON.stringify({job_id:id})});}catch(e){$("error").textContent="kill refused: "+e.message;}refresh();};
}
async function workersPage(){
 const d=await api("/api/workers");
 $("content").innerHTML=(d.groups.length?"":"<p>No workers registered.</p>")+d.groups.map(g=>
  `<div class="group"><h3>region ${esc(g.region)} · zone ${esc(g.zone)} · scale group ${esc(g.scale_group)}</h3>`+
  table("workers",["Worker","Health","CPU","Memory","Accelerators","Last heard","Running attempts"],g.workers.map(w=>[
   esc(w.worker_id),st(w.health),w.cpu,(w.memory_bytes/1e9).toFixed(1)+" GB",w.accelerators,w.last_heard_s_ago+" s ago",
   w.running.map(a=>a.job_id?`<a href="#/job/${encodeURIComponent(a.job_id)}">${esc(a.job_id)}</a>[${a.task_index}] ${st(a.state)}`:esc(a.attempt_id)).join("<br>")]),
   "worker-row")+"</div>").join("");
}
async function schedulerPage(){
 const d=await api("/api/scheduler");
 $("content").innerHTML=`<p>${d.pending_tasks} tasks pending</p>`+d.bands.map(b=>`<div class="group"><h3>${esc(b.priority)} (${b.jobs.length} jobs)</h3>`+
  table("band-"+b.priority,["Job","User","Pending tasks","Submitted","Why pending"],b.jobs.map(j=>[
   `<a href="#/job/${encodeURIComponent(j.job_id)}">${esc(j.job_id)}</a>`,esc(j.user),j.pending_tasks,when(j.submitted_at),
   reason(j.pending_reason)||'<span class="muted">not tried yet</span>']),"pending-row")+"</div>").join("");
}
function dur(x){if(x==null)return "";x=Number(x);return x<120?x.toFixed(0)+" s":x<7200?(x/60).toFixed(0)+" min":(x/3600).toFixed(1)+" h";}
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
  $("content").innerHTML=`<p id="capacity-note">${esc(d.note)}</p>`+(d.configured?
   table("scale-groups",["Scale group","Region","Accelerator","Zones","Min","Max","Buffer"],
    d.scale_groups.map(g=>[esc(g.name),esc(g.region),esc(g.accelerator_variant||g.accelerator_type),esc((g.zones||[]).join(", ")),
    g.min_slices,g.max_slices,g.buffer_slices]),"group-row"):"<p>No cluster config was given to this controller, so there are no scale groups.</p>");
  return;
 }
 let gi=0;
 $("content").innerHTML=(d.regions.length?"":'<p id="capacity-note">The autoscaler reports no regions yet.</p>')+d.regions.map((r,ri)=>
  `<div class="group region"><h2>Region ${esc(r.region)}</h2>`+(r.groups.length?r.groups.map(g=>scaleGroup(g,gi++)).join(""):'<p class="muted">No scale groups.</p>')+
  `<h3>Recent autoscaler decisions <span class="muted">(newest first)</span></h3>`+(r.decisions.length?
   table("decisions-"+ri,["When","Action","Group","Slice","Zone","Reason"],r.decisions.map(x=>[x.ago_s!=null?dur(x.ago_s)+" ago":"",
    st(x.action),esc(x.group),esc(x.slice_id),esc(x.zone),esc(x.reason)]),"decision-row"):'<p class="muted">No decisions yet.</p>')+"</div>").join("");
}
async function actorsPage(){
 const d=await api("/api/actors");
 $("content").innerHTML=d.actors.length?table("actors",["Name","Namespace","Host","Address"],
  d.actors.map(a=>[esc(a.name),esc(a.namespace),esc(a.host),esc(a.address)]),"actor-row"):"<p>No actors registered.</p>";
}
async function refresh(){
 const route=location.hash.replace(/^#/,"")||"/jobs";
 const nav=route.split("/")[1];
 document.querySelectorAll("nav a").forEach(a=>a.classList.toggle("on",a.id==="nav-"+nav||(nav==="job"&&a.id==="nav-jobs")));
 if(route!==shownRoute){shownRoute=route;$("controls").innerHTML="";if(route==="/jobs")jobsControls();}
 try{
  if(route.startsWith("/job/"))await jobPage(decodeURIComponent(route.slice(5)));
  else await ({"/workers":workersPage,"/scheduler":schedulerPage,"/capacity":capacityPage,
   "/actors":actorsPage}[route]||jobsPage)();
  $("error").textContent="";document.title="Iris · "+(nav||"jobs");
 }catch(e){$("error").textContent=e.message;}
}
window.addEventListener("hashchange",refresh);
refresh();setInterval(()=>{if(!document.hidden)refresh();},2000);
</script></body></html>
"""
