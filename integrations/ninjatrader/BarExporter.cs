// BarExporter: appends every closed bar of its chart to a text file that
// `hybrid-trader run --feed follow:FILE` reads, in NinjaTrader 8's own export format:
//
//     yyyyMMdd HHmmss;open;high;low;close;volume        e.g. 20240102 143100;16825.25;16827;16824.5;16826.75;412
//
// * no header line, ';' between fields, '.' as the decimal point whatever the Windows locale;
// * the time is the bar's END (NinjaTrader stamps a bar with its close time) in UTC, exactly as
//   Tools > Historical Data > Export writes it; the reader moves it back one bar to the bar's start
//   (--stamps end, the default for this format), so no bar is read one bar late;
// * one line per closed bar, written whole and flushed at once, so the reader never sees half a bar.
//
// Install: integrations/ninjatrader/README.md. Minute charts only (1-minute, or the run's bar size).
#region Using declarations
using System;
using System.ComponentModel;
using System.ComponentModel.DataAnnotations;
using System.Globalization;
using System.IO;
using NinjaTrader.Cbi;
using NinjaTrader.Data;
using NinjaTrader.NinjaScript;
#endregion

// Indicators must live in this namespace for NinjaTrader to list them.
namespace NinjaTrader.NinjaScript.Indicators
{
    public class BarExporter : Indicator
    {
        private StreamWriter writer;
        private DateTime lastWrittenUtc = DateTime.MinValue;  // bars at or before it are already in the file
        private string path;

        protected override void OnStateChange()
        {
            if (State == State.SetDefaults)
            {
                Name = "BarExporter";
                Description = "Appends each closed bar to a file for hybrid-trader (yyyyMMdd HHmmss;o;h;l;c;v, UTC, end of bar).";
                // OnBarUpdate runs once per bar, when it has closed (on the first tick of the next bar),
                // so Time[0]..Volume[0] are final: the same semantics as acting on IsFirstTickOfBar for bar [1].
                Calculate = Calculate.OnBarClose;
                IsOverlay = true;
                DisplayInDataBox = false;
                IsSuspendedWhileInactive = false;  // keep writing while the chart is hidden or minimised
                FilePath = string.Empty;
                WriteHistory = true;
            }
            else if (State == State.DataLoaded)
            {
                if (BarsPeriod.BarsPeriodType != BarsPeriodType.Minute)
                {
                    Log("BarExporter: the chart must hold Minute bars; nothing is written", LogLevel.Error);
                    return;
                }
                // Default file: <Documents>\NinjaTrader 8\hybrid-trader\<instrument>.txt, e.g. "NQ 12-26.txt".
                path = string.IsNullOrWhiteSpace(FilePath)
                    ? Path.Combine(NinjaTrader.Core.Globals.UserDataDir, "hybrid-trader", Instrument.FullName + ".txt")
                    : FilePath;
                Directory.CreateDirectory(Path.GetDirectoryName(path));
                lastWrittenUtc = LastStampInFile(path);  // a reloaded chart does not write its history twice
                // Append; let the reader (and other programs) open the file while it is written.
                FileStream stream = new FileStream(path, FileMode.Append, FileAccess.Write, FileShare.ReadWrite);
                writer = new StreamWriter(stream) { AutoFlush = true, NewLine = "\r\n" };
            }
            else if (State == State.Terminated)
            {
                if (writer != null)
                {
                    writer.Dispose();
                    writer = null;
                }
            }
        }

        protected override void OnBarUpdate()
        {
            if (writer == null || BarsInProgress != 0)
                return;
            if (State == State.Historical && !WriteHistory)
                return;
            // Time[0] is the bar's end in the time zone of Tools > Options > General; the file is in UTC.
            DateTime endUtc = TimeZoneInfo.ConvertTimeToUtc(Time[0], NinjaTrader.Core.Globals.GeneralOptions.TimeZoneInfo);
            if (endUtc <= lastWrittenUtc)
                return;  // already in the file (chart reloaded) or out of order
            CultureInfo inv = CultureInfo.InvariantCulture;
            string line = endUtc.ToString("yyyyMMdd HHmmss", inv)
                + ";" + Open[0].ToString("0.########", inv)
                + ";" + High[0].ToString("0.########", inv)
                + ";" + Low[0].ToString("0.########", inv)
                + ";" + Close[0].ToString("0.########", inv)
                + ";" + ((long)Volume[0]).ToString(inv);
            writer.Write(line + writer.NewLine);  // one write per line, flushed at once (AutoFlush)
            lastWrittenUtc = endUtc;
        }

        // The UTC end time of the file's last complete line (DateTime.MinValue when none is readable).
        private static DateTime LastStampInFile(string file)
        {
            if (!File.Exists(file))
                return DateTime.MinValue;
            string last = null;
            using (FileStream fs = new FileStream(file, FileMode.Open, FileAccess.Read, FileShare.ReadWrite))
            using (StreamReader reader = new StreamReader(fs))
            {
                string text;
                while ((text = reader.ReadLine()) != null)
                    if (text.Trim().Length > 0)
                        last = text;
            }
            DateTime stamp;
            if (last != null && DateTime.TryParseExact(last.Split(';')[0], "yyyyMMdd HHmmss", CultureInfo.InvariantCulture,
                    DateTimeStyles.AdjustToUniversal | DateTimeStyles.AssumeUniversal, out stamp))
                return stamp;
            return DateTime.MinValue;
        }

        #region Properties
        [NinjaScriptProperty]
        [Display(Name = "File path", Description = "Where the bars go; empty: Documents\\NinjaTrader 8\\hybrid-trader\\<instrument>.txt", Order = 1, GroupName = "Parameters")]
        public string FilePath { get; set; }

        [NinjaScriptProperty]
        [Display(Name = "Write history", Description = "Also write the chart's historical bars (they warm the features up; they are never traded)", Order = 2, GroupName = "Parameters")]
        public bool WriteHistory { get; set; }
        #endregion
    }
}
