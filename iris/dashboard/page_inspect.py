"""The job page's look inside the job: per task CPU and memory over time (the request drawn as
a line), the summary of each attempt, the job's events, and on a running task its stacks,
a profile drawn as a flame graph in the page, and links to its named ports (the proxy).

Not the data (/api/job/summary, /api/task/stack, /api/task/profile, /proxy/...). The usage
part is redrawn on each refresh; what a button fetched (a stack, a flame graph) stays until
the next button.
"""

INSPECT_JS = r"""
function usageChart(id,points,key,request,label,fmt){
 const W=300,H=90,pts=points.filter(p=>p[key]!=null);
 if(!pts.length)return `<div class="uchart"><div class="muted">${label}</div><svg id="${id}" width="${W}" height="${H}"></svg><div class="muted" style="font-size:12px">no reading yet</div></div>`;
 const t0=pts[0].at,span=Math.max(1,pts[pts.length-1].at-t0);
 const top=Math.max(request||0,...pts.map(p=>p[key]))*1.15||1;
 const y=v=>(H-4-(H-8)*v/top).toFixed(1);
 const xy=pts.map(p=>`${(W*(p.at-t0)/span).toFixed(1)},${y(p[key])}`).join(" ");
 const req=request?`<line class="request" x1="0" x2="${W}" y1="${y(request)}" y2="${y(request)}"><title>requested: ${fmt(request)}</title></line>`:"";
 const last=pts[pts.length-1][key],peak=Math.max(...pts.map(p=>p[key]));
 return `<div class="uchart"><div class="muted">${label}</div><svg id="${id}" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">${req}<polyline class="series" points="${xy}"/></svg>
  <div class="muted" style="font-size:12px">now ${fmt(last)} · peak ${fmt(peak)}${request?" · asked "+fmt(request):" · none asked"}</div></div>`;}
function cores(x){return x==null?"":Number(x).toFixed(2)+" cores";}
let inspectShown={id:null};
function usageHtml(s){
 const req=s.request||{};
 const rows=s.tasks.flatMap(t=>t.attempts.map(a=>[t.index,"#"+a.number,a.queue_s==null?"":dur(a.queue_s),a.run_s==null?"":dur(a.run_s),
  (a.killed_for_memory?'<b class="bad">':"")+esc(a.ended)+(a.killed_for_memory?"</b>":""),
  a.cpu_s==null?"":Number(a.cpu_s).toFixed(1)+" s",a.mean_cores==null?"":Number(a.mean_cores).toFixed(2),
  a.peak_rss_bytes?human(a.peak_rss_bytes)+(a.memory_request_bytes?` <span class="muted">of ${human(a.memory_request_bytes)}</span>`:""):"",
  a.chips?Number(a.chip_hours).toFixed(3):"",esc(a.retried_because||"")]));
 const tt=s.totals;
 const charts=s.tasks.map(t=>`<div class="usage-charts" id="charts-task-${t.index}"><b>task ${t.index}</b> ${st(t.state)}
  ${usageChart("cpu-chart-"+t.index,t.series,"cores",req.cpu,"CPU (cores)",cores)}
  ${usageChart("mem-chart-"+t.index,t.series,"rss_bytes",req.memory_bytes,"Memory (RSS)",human)}</div>`).join("");
 const events=(s.events||[]).map(e=>`<li>${when(e.at)} ${esc(e.kind)} by ${esc(e.user)}${e.operator?" (operator)":""} into task ${e.task}: <code>${esc(e.command)}</code></li>`).join("");
 return `<h3>Usage</h3><div id="usage-charts-all">${charts}</div>`+table("usage-summary",["Task","Attempt","Queued","Ran","Ended","CPU","Mean cores","Peak RSS","Chip-hours","Retried because"],rows,"usage-row")+
  `<p id="usage-totals">Totals: ${tt.attempts} attempts, ${tt.retries} retries, CPU ${tt.cpu_s==null?"—":Number(tt.cpu_s).toFixed(1)+" s"}, run ${dur(tt.run_s)}, peak RSS ${tt.peak_rss_bytes?human(tt.peak_rss_bytes):"—"}, ${Number(tt.chip_hours).toFixed(3)} chip-hours${tt.killed_for_memory?`, <b class="bad">${tt.killed_for_memory} killed for memory</b>`:""}</p>`+
  (events?`<h3>Events</h3><ul id="job-events">${events}</ul>`:"");}
function toolsHtml(id,s){
 const ports=(s.request&&s.request.ports)||[];
 const running=s.tasks.filter(t=>t.state==="running");
 if(!running.length)return "";
 return `<h3>Inside a running task</h3>`+running.map(t=>`<div class="task-tools" id="tools-task-${t.index}">task ${t.index}:
  <button class="stack-btn" id="stack-btn-${t.index}" data-task="${t.index}">Stacks</button>
  <button class="profile-btn" id="profile-btn-${t.index}" data-task="${t.index}">Profile 5 s</button>
  ${ports.map(p=>`<a class="port-link" id="port-${t.index}-${esc(p)}" target="_blank" href="/proxy/${encodeURIComponent(id)}/${t.index}/${encodeURIComponent(p)}/${TOKEN?"?token="+encodeURIComponent(TOKEN):""}">${esc(p)} ↗</a>`).join(" ")}</div>`).join("");}
async function showStack(id,task){const out=$("inspect-out");out.innerHTML=`<p class="muted">reading the stacks of task ${task}…</p>`;
 try{const d=await api(`/api/task/stack?id=${encodeURIComponent(id)}&task=${task}`);
  out.innerHTML=`<p>Stacks of task ${task} <span class="muted">(attempt ${esc(d.attempt_id)} on ${esc(d.worker_id)}, read in ${dur(d.took_s)})</span></p>`+
   d.processes.map(p=>`<pre class="stack-out">=== process ${p.pid}: ${esc(p.command)}\n${esc(p.text)}</pre>`).join("");}
 catch(e){out.innerHTML=`<p class="bad" id="inspect-error">${esc(e.message)}</p>`;}}
function flameTree(folded){const root={name:"all",n:0,kids:{}};
 for(const line of folded.split("\n")){const i=line.lastIndexOf(" ");if(i<0)continue;const n=parseInt(line.slice(i+1));if(!n)continue;
  root.n+=n;let node=root;for(const f of line.slice(0,i).split(";")){node=node.kids[f]=node.kids[f]||{name:f,n:0,kids:{}};node.n+=n;}}
 return root;}
function flameHtml(folded){const root=flameTree(folded);if(!root.n)return '<p class="muted" id="flame-empty">No samples: the task was idle (sleeping or waiting) the whole time.</p>';
 const out=[];let depth=0;
 (function place(node,x,d){const w=100*node.n/root.n;if(w<0.1)return;depth=Math.max(depth,d);
  out.push(`<div class="flame-frame" style="left:${x.toFixed(3)}%;width:${w.toFixed(3)}%;top:${d*18}px" title="${esc(node.name)} — ${node.n} samples (${w.toFixed(1)}%)">${esc(node.name)}</div>`);
  let off=x;for(const k of Object.keys(node.kids).sort()){const c=node.kids[k];place(c,off,d+1);off+=100*c.n/root.n;}})(root,0,0);
 return `<div id="flame" style="height:${(depth+1)*18+2}px">${out.join("")}</div>`;}
async function showProfile(id,task){const out=$("inspect-out");out.innerHTML=`<p class="muted">profiling task ${task} for 5 s…</p>`;
 try{const d=await api(`/api/task/profile?id=${encodeURIComponent(id)}&task=${task}&seconds=5`);
  out.innerHTML=`<p>Profile of task ${task} <span class="muted" id="profile-note">${esc(d.note)}</span></p>`+flameHtml(d.folded);}
 catch(e){out.innerHTML=`<p class="bad" id="inspect-error">${esc(e.message)}</p>`;}}
async function inspectSection(id){
 if(inspectShown.id!==id){inspectShown.id=id;$("inspect-out").innerHTML="";}
 let s;try{s=await api("/api/job/summary?id="+encodeURIComponent(id));}catch(e){$("usage-wrap").innerHTML=`<p class="muted">usage unavailable: ${esc(e.message)}</p>`;return;}
 $("usage-wrap").innerHTML=usageHtml(s);$("tools-wrap").innerHTML=toolsHtml(id,s);
 document.querySelectorAll(".stack-btn").forEach(b=>b.onclick=()=>showStack(id,b.dataset.task));
 document.querySelectorAll(".profile-btn").forEach(b=>b.onclick=()=>showProfile(id,b.dataset.task));}
"""

INSPECT_CSS = r"""
.usage-charts{display:flex;gap:18px;align-items:center;margin:6px 0;flex-wrap:wrap}
.uchart{border:1px solid #e3e6ea;border-radius:6px;padding:4px 8px}
.uchart polyline.series{fill:none;stroke:#23395d;stroke-width:1.5}
.uchart line.request{stroke:#c0392b;stroke-width:1;stroke-dasharray:4 3}
.task-tools{margin:4px 0}.port-link{margin-left:10px}
#flame{position:relative;width:100%;border:1px solid #ddd;overflow:hidden;font:11px monospace}
.flame-frame{position:absolute;height:17px;background:#f6a04d;border-right:1px solid #fff;
 overflow:hidden;white-space:nowrap;text-overflow:ellipsis;box-sizing:border-box;padding-left:2px}
.flame-frame:hover{background:#f3c16c}pre.stack-out{max-height:360px}
"""
